"""WebShop search: the reference's pyserini/Lucene BM25 index, in pure Python (bm25s).

    engine = SearchEngine(catalogue.products)
    engine.search("running shoes")   # -> indices of the top 50 products

Documents are ``lower(Title + ' ' + Description + ' ' + BulletPoints[0] + ' ' + options)`` with
options written ``"color: black | white, navy blue, and size: 9, 10 wide"`` (the reference's
``convert_product_file_format.py``). Analyzer = Lucene's EnglishAnalyzer: standard tokenizer (UAX#29
word breaks, approximated for Latin text by the regex below), possessive filter, lower case, the 33
English stop words, Porter stemmer (words of <= 2 letters are left alone, as in Lucene's port).
Scoring = Lucene BM25 (k1=0.9, b=0.4, idf = ln(1 + (N - df + 0.5) / (df + 0.5)), exact document
lengths); a query term written twice counts twice (Anserini's bag-of-words query). Hits are ranked
by score, ties by catalogue order. Only products that contain a query term are hits, as with
pyserini's Lucene index (a query with no match gives an empty page). ``pad_unmatched=True`` lists
zero-score products after the hits: the spec's transcripts were recorded with a stand-in ranker
instead of pyserini (no Java), which did that; only their replay needs it.
"""
from __future__ import annotations

import re

import numpy as np

LUCENE_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split())
# letters joined by . ' : (UAX#29 MidLetter/MidNumLet), digits joined by . , ; ' (MidNum)
_TOKEN = re.compile(r"\w+(?:(?:(?<=[^\W\d_])[.:'\u2019\u00b7](?=[^\W\d_])|(?<=\d)[.,;'\u2019](?=\d))\w+)*")
_POSSESSIVE = re.compile(r"['\u2019\uff07][sS]$")
SEARCH_RETURN_N = 50


class Analyzer:
    """Lucene EnglishAnalyzer equivalent; memoises stems (the vocabulary is small)."""

    def __init__(self):
        import Stemmer                      # PyStemmer: Snowball's "porter" = the original Porter
        self._stemmer = Stemmer.Stemmer("porter")
        self._stems: dict = {}

    def stem(self, token: str) -> str:
        s = self._stems.get(token)
        if s is None:
            s = token if len(token) <= 2 else self._stemmer.stemWord(token)
            if len(self._stems) < 200_000:        # bounded: fuzzed queries must not grow memory
                self._stems[token] = s
        return s

    def __call__(self, text: str) -> list:
        out = []
        for tok in _TOKEN.findall(text):
            tok = _POSSESSIVE.sub("", tok).lower()
            if tok and tok not in LUCENE_STOP_WORDS:
                out.append(self.stem(tok))
        return out


def product_document(p) -> str:
    """The text the reference indexes for one product."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in p.options.items())
    first_bullet = p.bullet_points[0] if p.bullet_points else ""
    return " ".join([p.title, p.description, first_bullet, option_text]).lower()


class SearchEngine:
    """BM25 over the product documents; ``search`` returns catalogue indices."""

    def __init__(self, products, k1: float = 0.9, b: float = 0.4, pad_unmatched: bool = False,
                 top_n: int = SEARCH_RETURN_N):
        import bm25s
        self.analyzer = Analyzer()
        self.pad_unmatched, self.top_n = pad_unmatched, top_n
        self.n_docs = len(products)
        corpus = [self.analyzer(product_document(p)) for p in products]
        # float64 so that equal Lucene scores stay equal and tie order is exactly catalogue order
        self._bm25 = bm25s.BM25(method="lucene", k1=k1, b=b, dtype="float64")
        self._bm25.index(corpus, show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        ids = self._bm25.get_tokens_ids(self.analyzer(query.lower()))
        if not ids:
            return np.zeros(self.n_docs)
        return self._bm25.get_scores(ids)

    def search(self, query: str) -> list:
        scores = self.scores(query)
        order = np.argsort(-scores, kind="stable")[: self.top_n]
        if not self.pad_unmatched:
            order = order[scores[order] > 0]
        return order.tolist()
