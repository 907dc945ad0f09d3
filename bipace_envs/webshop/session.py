"""One WebShop browsing session: the reference's SimServer/SimBrowser rules without Flask.

    s = Session(catalogue, engine, goal)
    s.search("running shoes"); s.click("b000000001"); s.click("navy blue"); s.click("buy now")

Rules: ``search[kw]`` works from any page and clears the chosen options; ``click[x]`` only for a
current clickable other than ``search``; ``back to search`` also forgets visited products; ``< prev``
from the item page returns to the results (options cleared), from a sub-page to the item page
(options kept); ``next >``/``< prev`` on the results page move one page (10 products from the top 50).
State is a handful of fields (no history), so memory stays flat over any number of steps.
"""
from __future__ import annotations

import json
import random

from . import pages
from .filters import filtered_results
from .reward import get_reward

PRODUCT_WINDOW = 10


def parse_action(action: str):
    """``re.match(r'(.+)\\[(.+)\\]', action)`` in linear time: (name, arg) or (action, None).
    '.' stops at a newline, so the match lies in the first line; group 1 is greedy, so it ends at
    the last '[' that still has a ']' two or more characters later, and group 2 ends at the last ']'."""
    line = action.split("\n", 1)[0]
    close = line.rfind("]")
    if close < 3:
        return action, None
    open_ = line.rfind("[", 1, close - 1)
    if open_ < 1:
        return action, None
    return line[:open_], line[open_ + 1:close]


class Session:
    def __init__(self, catalogue, engine, goal: dict, fix_options: bool = False, nouns_mode: str = "auto",
                 rng: random.Random | None = None):
        self.catalogue, self.engine, self.goal = catalogue, engine, goal
        self.rng = rng or random.Random(0)          # draws the ``<r>`` filter's products
        self.fix_options, self.nouns_mode = fix_options, nouns_mode
        self.instruction = goal["instruction_text"]
        self.reward, self.reward_details = 0.0, None
        self.oracle_fell_back = False      # the imitable oracle handed over to the goal product's path
        self._to_index()

    # ----- state transitions (reference ``receive``) -----
    def _to_index(self):
        self.page_name, self.keywords, self.page, self.asin = "index", None, None, None
        self.results, self.visited, self.options, self.sub = [], set(), {}, None
        self._render()

    def _to_results(self, page: int):
        self.page_name, self.page, self.asin, self.options = "search_results", page, None, {}
        self._render()

    def search(self, keywords: str):
        self.keywords = keywords.split(" ")
        self.results = filtered_results(self.catalogue.products, self.keywords, self.rng)
        if self.results is None:
            self.results = self.engine.search(" ".join(self.keywords))
        self._to_results(1)

    def click(self, name: str) -> None:
        kind, target = self.clickables[name]
        if name == "buy now":
            self._buy()
        elif name == "back to search":
            self._to_index()
        elif name == "next >" and self.page_name == "search_results":
            self._to_results(self.page + 1)
        elif name == "< prev" and self.page_name == "search_results":
            self._to_results(self.page - 1)
        elif name == "< prev" and self.page_name == "item_sub_page":
            self.page_name = "item_page"
            self._render()
        elif name == "< prev" and self.page_name == "item_page":
            self._to_results(self.page)
        elif name in pages.SUB_PAGE_NAMES:
            # checked before options, as the reference does: an option value named
            # 'attributes' (or 'features', ...) opens that page and is not recorded
            self.page_name, self.sub = "item_sub_page", name.capitalize()
            self._render()
        else:
            if kind == "product":
                self.asin = target
                self.visited.add(target)
            elif kind == "label":
                self.options[target] = name
            self.page_name = "item_page"
            self._render()

    def _buy(self):
        product = self.catalogue.by_asin[self.asin]
        self.reward, self.reward_details = get_reward(
            product, self.goal, self.catalogue.prices[self.asin], self.options,
            fix_options=self.fix_options, nouns_mode=self.nouns_mode)
        self.page_name = "done"
        self._render()

    # ----- rendering -----
    def _render(self):
        ins = self.instruction
        if self.page_name == "index":
            self.nodes = pages.search_page(ins)
        elif self.page_name == "search_results":
            lo = (self.page - 1) * PRODUCT_WINDOW
            shown = [self.catalogue.products[i] for i in self.results[lo:lo + PRODUCT_WINDOW]]
            self.nodes = pages.results_page(ins, shown, self.page, len(self.results))
        elif self.page_name == "item_page":
            self.nodes = pages.item_page(ins, self.catalogue.by_asin[self.asin])
        elif self.page_name == "item_sub_page":
            self.nodes = pages.sub_page(ins, self.catalogue.by_asin[self.asin], self.sub)
        else:
            self.nodes = pages.done_page(self.asin, self.options, self.reward)
        self.has_search_bar = self.page_name == "index"
        self.clickables = pages.clickables(self.nodes)

    def observation(self, mode: str = "text") -> str:
        if mode == "text":
            return pages.to_text(self.nodes)
        url = ""                    # stands for the reference's item-page URL (keywords + options JSON)
        if self.page_name == "item_page":
            url = f"{'+'.join(self.keywords or [])}/{json.dumps(self.options)}"
        return pages.to_text_rich(self.nodes, url, self.visited)

    def available_actions(self) -> dict:
        return {"has_search_bar": self.has_search_bar, "clickables": list(self.clickables)}

    def step(self, action: str) -> bool:
        """Apply a reference-format action; returns whether it was accepted (else a no-op)."""
        name, arg = parse_action(action)
        if arg is not None:
            arg = arg.lower()
        if name == "search" and arg:
            self.search(arg)
            return True
        if name == "click" and arg in self.clickables and arg != "search":
            self.click(arg)
            return True
        return False
