"""WebShop reward (the reference's ``engine/goal.py`` ``get_reward``, master), term by term.

    score, details = get_reward(product, goal, price, {"size": "9"}, fix_options=False)

total = (n_attr + n_opt + [price <= price_upper]) / (len(goal attrs) + len(goal opts) + 1) * r_type.
Fuzzy matching is thefuzz's ``token_set_ratio`` (rapidfuzz underneath; thefuzz's ascii filter,
default processing and integer rounding reproduced). The option term is master's
``get_option_reward``: each goal option counts once if some chosen value matches it fuzzily
(size too); chosen values are never credited for occurring in the title, bullets or description,
so n_opt <= len(goal opts) and the total never exceeds 1.

``fix_options=False`` keeps the reference quirk: synthetic goals pass their options as
``dict.items()``, so each goal option is a ``(name, value)`` tuple. ``normalize_color`` maps a tuple
to a colour only when one of its items *is* a colour name, while a chosen value is mapped whenever
it merely *contains* one: ``standard`` becomes ``tan`` and ``peppermint`` ``mint``, and then no
longer matches ``str(("size", "standard"))``. ``fix_options=True`` compares the goal's values, so
both sides are normalised alike. The type reward's title score needs spaCy noun tags
(``en_core_web_lg``/``_sm``); without a model, nouns are approximated by content words (labelled
in ``details['title_nouns']``).
"""
from __future__ import annotations

import functools

from rapidfuzz import fuzz, utils

COLOR_SET = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown "
    "burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac "
    "copper coral cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite "
    "grape graphite grass gray green grey heather indigo ivory ivy khaki lavender lemon leopard light "
    "lilac lime magenta maroon mauve merlot midnight mint mocha multicolor mushroom mustard natural "
    "navy nude olive orange peach pewter pink plum purple rainbow red rose royal rust sand sapphire "
    "seashell silver skull slate steel stone stonewash sunflower tan taupe teal tiger turquoise violet "
    "walnut wheat white wine yellow").split()
_LATIN1 = {i: None for i in range(128, 256)}


def normalize_color(value):
    """First COLOR_SET name contained in value (for a tuple: equal to one of its items)."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def token_set_ratio(a, b) -> int:
    """thefuzz.fuzz.token_set_ratio(a, b): str(), drop U+0080..U+00FF, default process, round."""
    if a is None or b is None:
        return 0
    a = utils.default_process(str(a).translate(_LATIN1))
    b = utils.default_process(str(b).translate(_LATIN1))
    return int(round(fuzz.token_set_ratio(a, b)))


@functools.lru_cache(maxsize=1)
def _spacy_model():
    import importlib.util
    # look for the model packages first: importing spaCy alone costs seconds
    for name in ("en_core_web_lg", "en_core_web_sm"):
        if importlib.util.find_spec(name) is not None:
            import spacy
            return spacy.load(name, disable=["parser", "ner", "lemmatizer"])
    return None


# Function words and common product adjectives that the approximate noun tagger skips.
_NON_NOUNS = frozenset(
    "a an and are as at be but by for from if in into is it its no not of on or such that the their "
    "then there these they this to was will with without your you our my me i we us all any each "
    "more most other some new best great high low big small large premium natural organic soft "
    "lightweight breathable durable waterproof portable adjustable easy non long short extra super "
    "ultra compatible professional classic modern vintage cute comfortable heavy fast slim".split())


@functools.lru_cache(maxsize=65536)
def title_nouns(text: str, mode: str = "auto") -> tuple:
    """Lower-cased NOUN/PROPN tokens of text (spaCy when a model is installed and mode != 'approx');
    returns (tokens, method)."""
    nlp = _spacy_model() if mode in ("auto", "spacy") else None
    if mode == "spacy" and nlp is None:
        raise RuntimeError("title_nouns='spacy' needs spaCy with en_core_web_lg or en_core_web_sm installed")
    if nlp is not None:
        return tuple(t.text.lower() for t in nlp(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")), "spacy"
    toks = [t.strip(".,;:!?()[]{}\"'").lower() for t in text.replace("/", " ").split()]
    toks = [t[:-2] if t.endswith("'s") else t for t in toks]
    return tuple(t for t in toks if t.isalpha() and t not in _NON_NOUNS), "approx"


def type_reward(product, goal, nouns_mode: str = "auto") -> dict:
    query_match = product.query == goal["query"]
    cats_p = {x.strip() for x in product.product_category.split("›")}
    cats_g = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(cats_p & cats_g) >= 2
    purchased, method = title_nouns(product.name, nouns_mode)
    desired, _ = title_nouns(goal["name"], nouns_mode)
    if not desired:
        title_score = 0.2
    else:
        title_score = len(set(purchased) & set(desired)) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return dict(r_type=r_type, query_match=query_match, category_match=category_match,
                title_score=title_score, title_nouns=method)


def _in_text(value, product) -> bool:
    return (value in product.title.lower() or value in " ".join(product.bullet_points).lower()
            or value in product.description.lower())


def attribute_matches(product, goal_attrs) -> int:
    n = 0
    for g_attr in goal_attrs:
        fuzzy = any(token_set_ratio(p_attr, g_attr) > 85 for p_attr in product.attributes)
        if fuzzy or _in_text(g_attr, product):
            n += 1
    return n


def option_matches(goal_options, purchased_options: dict) -> int:
    """Goal options matched by some chosen value (master's loop: each goal option counts once)."""
    chosen = [normalize_color(v) for v in purchased_options.values()]
    goal = [normalize_color(o) for o in goal_options]
    return sum(any(token_set_ratio(c, g) > 85 for c in chosen) for g in goal)


def goal_option_list(goal, fix_options: bool) -> list:
    opts = goal["goal_options"]
    if isinstance(opts, dict):
        return list(opts.values()) if fix_options else list(opts.items())
    return list(opts)


def get_reward(product, goal, price: float, options: dict, fix_options: bool = False,
               nouns_mode: str = "auto"):
    """Score in [0, 1] and its terms."""
    r_type = type_reward(product, goal, nouns_mode)
    r_price = price <= goal["price_upper"]
    n_attr = attribute_matches(product, goal["attributes"])
    n_opt = option_matches(goal_option_list(goal, fix_options), options)
    denom = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    total = (n_attr + n_opt + r_price) / denom
    total *= r_type["r_type"]
    details = dict(r_type, n_attr=n_attr, n_opt=n_opt, r_price=bool(r_price),
                   r_att=n_attr / len(goal["attributes"]) if goal["attributes"] else None,
                   r_option=n_opt / len(goal["goal_options"]) if goal["goal_options"] else None,
                   fix_options=fix_options)
    return total, details
