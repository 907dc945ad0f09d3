"""WebShop pages as the reference's text modes show them.

A page is a list of ``(kind, text, option_name)`` nodes standing for the visible text nodes of the
reference's HTML: ``kind`` is ``text``, ``button``, ``product`` (result link) or ``label`` (an option
radio). ``text`` mode joins the stripped nodes with `` [SEP] ``; ``text_rich`` writes one node a line
with ``[button] x [button_]`` / ``[clicked button] x [clicked button_]`` marks. Clickables follow the
reference's ``get_available_actions``: buttons and result links (lower-cased) first, then option
values; a repeated text keeps its first position and its last target.
"""
from __future__ import annotations

import json

SUB_PAGES = ("Description", "Features", "Reviews")
ITEM_BUTTONS = (*SUB_PAGES, "Buy Now")
# the reference's ACTION_TO_TEMPLATE: Attributes has no button, but a click on it still opens it
SUB_PAGE_NAMES = tuple(n.lower() for n in (*SUB_PAGES, "Attributes"))


def _head(instruction: str) -> list:
    return [("text", "Instruction:", None), ("text", instruction, None), ("button", "Back to Search", None)]


def search_page(instruction: str) -> list:
    return [("text", "WebShop", None), ("text", "Instruction: ", None), ("text", instruction, None),
            ("button", "Search", None)]


def results_page(instruction: str, products: list, page: int, total: int) -> list:
    nodes = _head(instruction) + [("text", f"Page {page} (Total results: {total})", None)]
    if page > 1:
        nodes.append(("button", "< Prev", None))
    nodes.append(("button", "Next >", None))
    for p in products:
        nodes += [("product", p.asin, None), ("text", p.title, None), ("text", p.price_tag, None)]
    return nodes


def item_page(instruction: str, p) -> list:
    nodes = _head(instruction) + [("button", "< Prev", None)]
    for name, values in p.options.items():
        nodes.append(("text", name, None))
        nodes += [("label", v, name) for v in values]
    nodes += [("text", p.title, None), ("text", f"Price: {p.price_tag}", None),
              ("text", "Rating: N.A.", None)]
    nodes += [("button", b, None) for b in ITEM_BUTTONS]
    return nodes


def sub_page(instruction: str, p, which: str) -> list:
    nodes = _head(instruction) + [("button", "< Prev", None)]
    if which == "Description":
        nodes.append(("text", p.description, None))
    elif which == "Features":
        # the template writes '<p> {{bulletpoint}}</p>': a space before each bullet, so even an
        # empty bullet is a text node (an empty segment in text mode)
        nodes += [("text", " " + b, None) for b in p.bullet_points]
    elif which == "Attributes":
        # attributes_page.html: one ' {{attribute}}' line each, then category, query, product category
        nodes += [("text", " " + a, None) for a in p.attributes]
        nodes += [("text", t, None) for t in (p.category, p.query, p.product_category)]
    return nodes                       # Reviews: no reviews are served


def options_json(options: dict) -> str:
    """Flask's ``tojson``: sorted keys, ASCII, HTML-safe escapes."""
    s = json.dumps(options, sort_keys=True)
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027")


def done_page(asin: str, options: dict, reward: float) -> list:
    texts = ["Thank you for shopping with us!", "Your code: ", "None", " (Paste it in your MTurk interface.)",
             "Purchased", "asin", asin, "options", options_json(options), "attrs", "None", "category", "None",
             "query", "None", "product category", "None", "Target", "asin", "options", "attrs", "price upper",
             "instuction text", "category", "product category", "query", "Goal ", "None", "Reward",
             "Your score (min 0.0, max 1.0)", str(reward), "Reward Details ", "None"]
    return [("text", t, None) for t in texts]


def _visible(nodes):
    # BeautifulSoup: an empty string is no text node; the reference skips a node that is exactly
    # '\n' but keeps other whitespace-only ones (' ', '\n\n'): text mode shows them as empty
    # segments after strip(), text_rich as they are
    return [n for n in nodes if n[1] not in (None, "", "\n")]


def to_text(nodes) -> str:
    return " [SEP] ".join(text.strip() for _, text, _ in _visible(nodes))


def to_text_rich(nodes, url: str = "", visited: frozenset = frozenset()) -> str:
    """``url`` stands for the reference's page URL (labels shown as clicked when ``"value"`` is in
    it); ``visited`` = asins opened since the last Back to Search."""
    out, clicked = [], []
    for kind, t, _ in _visible(nodes):
        if kind == "button":
            out.append(f"[button] {t} [button_]")
        elif kind == "label":
            if f'"{t}"' in url:
                out.append(f"  [clicked button] {t} [clicked button_]")
                clicked.append(t)
            else:
                out.append(f"  [button] {t} [button_]")
        elif kind == "product":
            mark = "clicked button" if t in visited else "button"
            out.append(f"\n[{mark}] {t} [{mark}_]")
        else:
            out.append(t)
    prefix = "".join(f"You have clicked {t}.\n" for t in reversed(clicked))
    return prefix + "".join(line + "\n" for line in out)


def clickables(nodes) -> dict:
    """text -> (kind, target): target is the asin for products, the option name for labels."""
    table = {}
    for kind, t, opt in nodes:
        if kind in ("button", "product"):
            table[t.lower()] = (kind, t)
    for kind, t, opt in nodes:
        if kind == "label":
            table[t] = ("label", opt)
    return table
