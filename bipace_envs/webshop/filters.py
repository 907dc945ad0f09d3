"""The reference's search-box filters (``engine.py`` ``get_top_n_product_from_keywords``): a search
whose first word is ``<r>``, ``<a>``, ``<c>`` or ``<q>`` lists products by a rule instead of BM25.

- ``<r>``: 50 products drawn without replacement. The reference uses the unseeded global
  ``random.sample``; here the episode's RNG draws them, so a seed replays the list. With fewer than
  50 products all are listed, shuffled (the reference raises ValueError).
- ``<a> words``: products whose attributes include ``words``. The reference's text env does not pass
  its attribute table, so there ``<a>`` raises TypeError; ours answers as its web app does.
- ``<c> word``: products whose category equals the second word; with no second word, none (the
  reference raises IndexError).
- ``<q> words``: products whose query equals the rest.

Rule-based lists keep catalogue order and, as in the reference, are not cut at 50.
"""
from __future__ import annotations

import random
from typing import Callable, Optional, Sequence

RANDOM_N = 50


def _random(products, words, rng: random.Random) -> list:
    return rng.sample(range(len(products)), min(RANDOM_N, len(products)))


def _attribute(products, words, rng) -> list:
    wanted = " ".join(words).strip()
    return [i for i, p in enumerate(products) if wanted in p.attributes]


def _category(products, words, rng) -> list:
    if not words:
        return []
    wanted = words[0].strip()
    return [i for i, p in enumerate(products) if p.category == wanted]


def _query(products, words, rng) -> list:
    wanted = " ".join(words).strip()
    return [i for i, p in enumerate(products) if p.query == wanted]


FILTERS: dict[str, Callable] = {"<r>": _random, "<a>": _attribute, "<c>": _category, "<q>": _query}


def filtered_results(products: Sequence, keywords: Sequence[str], rng: random.Random) -> Optional[list]:
    """Catalogue indices for a filter search, or None when the first keyword is no filter prefix."""
    rule = FILTERS.get(keywords[0]) if keywords else None
    return None if rule is None else rule(products, list(keywords[1:]), rng)
