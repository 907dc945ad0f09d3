"""Goal-buying oracle for WebShop: searches, pages to the goal product, picks the goal options, buys.

    from bipace_envs.webshop.oracle import oracle_action, oracle_actions
    a = oracle_action(env)          # next action from the current page (None once done)
    acts = oracle_actions(env)      # whole episode from the current state (steps a copy-free replay)

It reads the goal and the search index (privileged), so use it for imitation data and tests. The
query is the instruction without its option/price clauses, or the product title when only that one
shows the product on the first results page.
"""
from __future__ import annotations

import re

from .session import PRODUCT_WINDOW

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


def oracle_action(env) -> str | None:
    env = env.unwrapped
    s = env.session
    if env.done:
        return None
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


def oracle_actions(env, max_actions: int = 100) -> list:
    """Play the oracle to the end of the episode on env; returns the actions taken."""
    actions = []
    while len(actions) < max_actions:
        a = oracle_action(env)
        if a is None:
            break
        actions.append(a)
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    return actions
