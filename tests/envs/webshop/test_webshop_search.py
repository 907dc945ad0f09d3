"""Search ranking against a straightforward implementation of the spec's analyzer and BM25."""
from __future__ import annotations

import math
import re
from collections import Counter

import pytest

from bipace_envs.webshop.env import generated_catalogue
from bipace_envs.webshop.search import SearchEngine, product_document

STOP = set("a an and are as at be but by for if in into is it no not of on or such that the their then "
           "there these they this to was will with".split())
try:                                           # pure-Python Porter, a different package from the engine's
    import snowballstemmer
    _stem = snowballstemmer.stemmer("porter")
except ImportError:                            # pragma: no cover
    import Stemmer
    _stem = Stemmer.Stemmer("porter")


def naive_analyze(text):
    out = []
    for tok in re.findall(r"\w+(?:(?:(?<=[^\W\d_])[.:'’·](?=[^\W\d_])|(?<=\d)[.,;'’](?=\d))\w+)*", text):
        if tok.endswith(("'s", "’s", "'S")):
            tok = tok[:-2]
        tok = tok.lower()
        if tok and tok not in STOP:
            out.append(tok if len(tok) <= 2 else _stem.stemWord(tok))
    return out


def naive_rank(docs, query, k1=0.9, b=0.4, top=50):
    tfs = [Counter(d) for d in docs]
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    df = Counter(t for tf in tfs for t in tf)
    scores = []
    for tf, d in zip(tfs, docs):
        s = 0.0
        for t in naive_analyze(query):               # a repeated query term counts again
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
        scores.append(s)
    order = [i for i in sorted(range(n), key=lambda i: (-scores[i], i))[:top] if scores[i] > 0]
    return order, scores


@pytest.fixture(scope="module")
def catalogue():
    return generated_catalogue(600, 0, 0)


@pytest.fixture(scope="module")
def engine(catalogue):
    return SearchEngine(catalogue.products)


QUERIES = ["running shoes", "men's running shoes size 10 wide", "organic green tea", "usb c cable 6 ft",
           "i need a waterproof bluetooth speaker with deep bass", "throw pillow covers 18x18 inch",
           "shoes shoes", "the of and", "zzzz unknownword", "1.5 pound coffee", "hdmi 4k gold plated"]


@pytest.mark.parametrize("query", QUERIES)
def test_ranking_matches_naive_bm25(catalogue, engine, query):
    docs = [naive_analyze(product_document(p)) for p in catalogue.products]
    want, want_scores = naive_rank(docs, query)
    got = engine.search(query)
    assert got == want                      # only documents with a query term; ties in catalogue order
    assert engine.scores(query)[got] == pytest.approx([want_scores[i] for i in want], rel=1e-9)


def test_tie_order_is_catalogue_order(engine, catalogue):
    """Identical documents score the same; the earlier product ranks first."""
    import copy
    p = catalogue.products[0]
    twin = copy.copy(p)
    twin.asin = "B0TWIN0000"
    eng = SearchEngine([catalogue.products[1], twin, p] + catalogue.products[2:50])
    hits = eng.search(p.title)
    assert hits.index(1) < hits.index(2) and hits[:2] == [1, 2]


def test_search_returns_only_matches_unless_padded(catalogue, engine):
    """Lucene lists only documents that contain a query term; padding is opt-in (the transcripts'
    stand-in ranker)."""
    assert engine.search("zzzz unknownword") == []
    hits = engine.search("vegan")
    assert len(hits) == 7 and (engine.scores("vegan")[hits] > 0).all()   # 7 of 600 products say vegan
    padded = SearchEngine(catalogue.products, pad_unmatched=True)
    assert padded.search("zzzz unknownword") == list(range(50))
    assert padded.search("vegan")[:7] == hits and len(padded.search("vegan")) == 50
