"""Reference page details (issue 18): the Features template's leading space, whitespace-only text
nodes as BeautifulSoup keeps them, an option value named like a sub page, the search filters."""
from __future__ import annotations

import random

import gymnasium as gym
import pytest

import bipace_envs  # noqa: F401
from bipace_envs.common import EpisodeEndedError
from bipace_envs.webshop import pages
from bipace_envs.webshop.catalogue import Product
from bipace_envs.webshop.filters import filtered_results


def _product(**kw):
    base = dict(asin="B0TEST0001", name="Acme Shoe", title="Acme Shoe", description="A shoe.",
                bullet_points=["Rubber sole ", ""], pricing=[30.0], price_tag="$30.0",
                options={"style": ["attributes", "plain"]}, category="fashion", query="running shoes",
                product_category="Clothing › Shoes", attributes=["lightweight", "rubber sole"])
    base.update(kw)
    return Product(**base)


def test_features_page_writes_a_space_before_each_bullet():
    nodes = pages.sub_page("buy shoes", _product(), "Features")
    rich = pages.to_text_rich(nodes)
    assert rich.endswith("[button] < Prev [button_]\n Rubber sole \n \n")
    # text mode: the empty bullet is the node ' ', kept and stripped to an empty segment
    assert pages.to_text(nodes).endswith("< Prev [SEP] Rubber sole [SEP] ")
    only_empty = pages.sub_page("buy shoes", _product(bullet_points=[""]), "Features")
    assert pages.to_text(only_empty).endswith("< Prev [SEP] ")


def test_whitespace_only_text_nodes_as_beautifulsoup_keeps_them():
    nodes = [("text", "a", None), ("text", "", None), ("text", "\n", None), ("text", "  ", None),
             ("text", "\n\n", None), ("text", "b", None)]
    assert pages.to_text(nodes) == "a [SEP]  [SEP]  [SEP] b"          # '' and '\n' are no segments
    assert pages.to_text_rich(nodes) == "a\n  \n\n\n\nb\n"


def test_option_value_named_attributes_opens_the_attributes_page(monkeypatch):
    env = gym.make("bipace/WebShop-v0", split="all").unwrapped
    env.reset(seed=0, options={"task_id": 0})
    session = env.session
    asin = session.catalogue.products[0].asin
    # a product with that option value (the catalogue is shared: undo after the test)
    monkeypatch.setitem(session.catalogue.by_asin, asin, _product(asin=asin))
    session.asin, session.page_name = asin, "item_page"
    session._render()
    assert "attributes" in session.clickables
    obs, _, _, _, info = env.step("click[attributes]")
    assert info["action_valid"] and session.page_name == "item_sub_page" and session.options == {}
    assert obs.endswith("< Prev [SEP] lightweight [SEP] rubber sole [SEP] fashion [SEP] running shoes "
                        "[SEP] Clothing › Shoes")
    env.step("click[< prev]")
    env.step("click[plain]")
    assert session.options == {"style": "plain"}


def test_search_filter_prefixes():
    env = gym.make("bipace/WebShop-v0", split="all").unwrapped
    products = env.catalogue.products
    p = products[3]
    rng = random.Random(0)
    assert filtered_results(products, ["<c>", p.category], rng) == \
        [i for i, q in enumerate(products) if q.category == p.category]
    assert filtered_results(products, ["<q>", *p.query.split(" ")], rng) == \
        [i for i, q in enumerate(products) if q.query == p.query]
    assert 3 in filtered_results(products, ["<a>", *p.attributes[0].split(" ")], rng)
    assert filtered_results(products, ["<c>"], rng) == []                  # the reference raises
    assert filtered_results(products, ["running", "shoes"], rng) is None   # BM25 as usual
    drawn = filtered_results(products, ["<r>"], random.Random(5))
    assert len(set(drawn)) == 50 and drawn == filtered_results(products, ["<r>"], random.Random(5))
    # through the env: same seed, same random page; not cut at 50
    pages_seen = []
    for _ in range(2):
        env.reset(seed=11, options={"task_id": 0})
        pages_seen.append(env.step("search[<r>]")[0])
    assert pages_seen[0] == pages_seen[1] and "(Total results: 50)" in pages_seen[0]
    env.reset(seed=0, options={"task_id": 0})
    n = len([q for q in products if q.category == p.category])
    assert n > 50 and f"(Total results: {n})" in env.step(f"search[<c> {p.category}]")[0]


def test_a_step_after_buy_now_raises():
    """Documented difference: the reference still runs a search[...] from the done page; here buying
    ends the episode, as in every bipace env."""
    from bipace_envs.webshop import oracle_actions
    env = gym.make("bipace/WebShop-v0", split="all").unwrapped
    env.reset(seed=0, options={"task_id": 0})
    actions = oracle_actions(env)
    env.reset(seed=0, options={"task_id": 0})
    for action in actions:
        obs, r, term, trunc, info = env.step(action)
    assert term and actions[-1] == "click[buy now]" and info["admissible_actions"] == []
    with pytest.raises(EpisodeEndedError, match="after the episode ended"):
        env.step("search[running shoes]")
