"""Goal-buying oracle for WebShop: searches, pages to the goal product, picks the goal options, buys.

    from bipace_envs.webshop.oracle import oracle_action, oracle_actions
    a = oracle_action(env)          # next action from the current page (None once done)
    acts = oracle_actions(env)      # whole episode from the current state (steps a copy-free replay)

It reads the goal and the search index (privileged), so use it for imitation data and tests. The
query is the instruction without its option/price clauses, or the product title when only that one
shows the product on the first results page.

``mode="any_perfect"`` is the expert a policy can imitate (``agents.envs``' WebShop expert for SFT): it
searches with the instruction text only, clicks the first listed product that a purchase with the goal's
options would score 1.0 (pages on for up to ``PAGES`` pages), picks those options and buys. The default
``mode="goal"`` buys the goal product itself, and so in about half of the generated goals searches with
that product's title (measured on 200 training goals): a query no policy can infer from the instruction.
Where no listed product would score 1.0, ``any_perfect`` falls back to the goal product's path.
"""
from __future__ import annotations

import re

from .reward import get_reward, normalize_color, token_set_ratio
from .session import PRODUCT_WINDOW

PAGES = 3            # results pages ``any_perfect`` looks through before it falls back to the goal product

_PRICE = re.compile(r", and price lower than [\d.]+ dollars$")


def _queries(env):
    """Candidate queries: the instruction without its option and price clauses, then the title."""
    goal = env.unwrapped.session.goal
    base = _PRICE.sub("", goal["instruction_text"])
    opts = goal["goal_options"]
    if isinstance(opts, dict) and opts:
        suffix = " with " + ", and ".join(f"{k}: {v}" for k, v in opts.items())
        base = base[: -len(suffix)] if base.endswith(suffix) else base
    title = env.unwrapped.catalogue.by_asin[goal["asin"]].title
    return [q for q in (base.strip().lower(), title.lower()) if q]


def _best_query(env, asin: str) -> str:
    """First candidate that shows the product on page 1, else the one ranking it highest."""
    best, best_rank = None, None
    for q in _queries(env):
        ranks = [r for r, idx in enumerate(env.engine.search(q)) if env.catalogue.products[idx].asin == asin]
        if ranks and ranks[0] < PRODUCT_WINDOW:
            return q
        if ranks and (best_rank is None or ranks[0] < best_rank):
            best, best_rank = q, ranks[0]
    return best if best is not None else _queries(env)[-1]


def _goal_clicks(session) -> list:
    """Option values to click, as (option name or None, value), in the product's option order."""
    product = session.catalogue.by_asin[session.goal["asin"]]
    opts = session.goal["goal_options"]
    wanted = list(opts.values()) if isinstance(opts, dict) else list(opts)
    clicks = []
    for name, values in product.options.items():
        if isinstance(opts, dict) and name in opts and opts[name] in values:
            clicks.append((name, opts[name]))
        elif not isinstance(opts, dict):
            hit = next((v for v in wanted if v in values), None)
            if hit is not None:
                clicks.append((name, hit))
    return clicks


def perfect_options(session, product) -> dict | None:
    """The options (name -> value) with which buying ``product`` scores 1.0 for the session's goal (for
    each of its option lists, a value matching a goal option as the reward compares them), or None when
    no choice of them does."""
    opts = session.goal["goal_options"]
    wanted = [normalize_color(v) for v in (opts.values() if isinstance(opts, dict) else opts)]
    chosen = {}
    for name, values in product.options.items():
        hit = next((v for v in values if any(token_set_ratio(normalize_color(v), w) > 85 for w in wanted)),
                   None)
        if hit is not None:
            chosen[name] = hit
    score, _ = get_reward(product, session.goal, session.catalogue.prices[product.asin], chosen,
                          fix_options=session.fix_options, nouns_mode=session.nouns_mode)
    return chosen if score >= 1.0 else None


def _instruction_query(env) -> str:
    return _queries(env)[0]


def any_perfect_action(env) -> str | None:
    """``mode="any_perfect"``'s next action, or None where it hands over to the goal product's path."""
    s = env.session
    if s.page_name in ("index", "search") or s.page_name is None:
        return f"search[{_instruction_query(env)}]"
    if s.page_name == "item_sub_page":
        return "click[< prev]"
    if s.page_name == "item_page":
        product = s.catalogue.by_asin[s.asin]
        chosen = perfect_options(s, product)
        if chosen is None:
            return None
        for name, value in chosen.items():
            if s.options.get(name) != value and value in s.clickables and s.clickables[value][1] == name:
                return f"click[{value}]"
        return "click[buy now]"
    if s.page_name == "search_results":
        window = s.results[(s.page - 1) * PRODUCT_WINDOW:s.page * PRODUCT_WINDOW]
        for idx in window:
            if perfect_options(s, s.catalogue.products[idx]) is not None:
                return f"click[{s.catalogue.products[idx].asin.lower()}]"
        if s.page < PAGES and len(s.results) > s.page * PRODUCT_WINDOW:
            return "click[next >]"
    return None


def oracle_action(env, mode: str = "goal") -> str | None:
    """The next action of the oracle (None once the episode is over); ``mode``: goal | any_perfect."""
    if mode not in ("goal", "any_perfect"):
        raise ValueError(f"oracle mode must be 'goal' or 'any_perfect', got {mode!r}")
    env = env.unwrapped
    s = env.session
    if env.done:
        return None
    if mode == "any_perfect" and not s.oracle_fell_back:
        action = any_perfect_action(env)
        if action is not None:
            return action
        s.oracle_fell_back = True       # the rest of the episode follows the goal product
    asin = s.goal["asin"]
    if s.page_name == "item_sub_page":
        return "click[< prev]"
    if s.page_name == "item_page" and s.asin == asin:
        for name, value in _goal_clicks(s):
            if s.options.get(name) != value and value in s.clickables and s.clickables[value][1] == name:
                return f"click[{value}]"
        return "click[buy now]"
    if s.page_name == "search_results":
        ranks = [i for i, idx in enumerate(s.results) if s.catalogue.products[idx].asin == asin]
        if ranks:
            page = ranks[0] // PRODUCT_WINDOW + 1
            if page == s.page:
                return f"click[{asin.lower()}]"
            return "click[next >]" if page > s.page else "click[< prev]"
    return f"search[{_best_query(env, asin)}]"


def oracle_actions(env, max_actions: int = 100, mode: str = "goal") -> list:
    """Play the oracle (``mode`` as ``oracle_action``) to the end of the episode on env; returns the
    actions taken."""
    actions = []
    while len(actions) < max_actions:
        a = oracle_action(env, mode)
        if a is None:
            break
        actions.append(a)
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    return actions
