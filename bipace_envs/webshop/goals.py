"""WebShop goals (the reference's ``engine/goal.py``) and the split presets.

    goals = build_goals(catalogue, kind="synthetic", seed=0)   # shuffled with random.seed(233)
    lo, hi = split_range("verl_agent", "test", len(goals))    # (0, 500)

Synthetic goals (``items_ins_v2``): one per combination of a product's option values (option names
sorted), ``"{instruction} with {opt}: {val}, and {opt}: {val}, and price lower than {X:.2f} dollars"``.
Human goals (``items_human_ins``): ``instruction.strip('.') + ", and price lower than ..."``, skipped
when they have no attributes. price_upper = the larger of 2 draws among the first 4 multiples of 10
above the product's price (1,000,000 and no price text when fewer than 2 exist). Sampling weight of
a synthetic goal = mean over its attributes of 1 / (number of goals using that attribute); human 1.
The reference draws with the unseeded global ``random``; ours with ``random.Random(seed)``; the final
shuffle is the reference's ``random.seed(233); random.shuffle(goals)``.
"""
from __future__ import annotations

import itertools
import random
from collections import defaultdict

PRICE_RANGE = [10.0 * i for i in range(1, 100)]
SHUFFLE_SEED = 233
# preset -> split -> [start, stop) over the shuffled goals (None = to the end)
SPLITS = {
    "original": {"test": (0, 500), "eval": (500, 1500), "train": (1500, None)},
    "verl_agent": {"test": (0, 500), "train": (500, None)},
}


def _price_upper(price: float, rng: random.Random):
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) >= 2:
        _, upper = sorted(rng.sample(price_range, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return 1000000, ""


def _base(product) -> dict:
    return {"asin": product.asin, "category": product.category, "query": product.query,
            "name": product.name, "product_category": product.product_category}


def synthetic_goals(catalogue, rng: random.Random) -> list:
    goals, counts = [], defaultdict(int)
    for p in catalogue.products:
        if p.instruction_text is None:
            continue
        if not p.instruction_attributes:
            raise ValueError(f"product {p.asin}: synthetic instruction without instruction_attributes")
        upper, price_text = _price_upper(catalogue.prices[p.asin], rng)
        names = sorted(p.options)
        for combo in itertools.product(*(p.options[n] for n in names)):
            goal_options = dict(zip(names, combo))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append(dict(_base(p), instruction_text=f"{p.instruction_text}{option_text}{price_text}",
                              attributes=p.instruction_attributes, price_upper=upper,
                              goal_options=goal_options, name=p.title))
            for att in p.instruction_attributes:
                counts[att] += 1
    for g in goals:
        g["weight"] = sum(1.0 / counts[a] for a in g["attributes"]) / len(g["attributes"])
    return goals


def human_goals(catalogue, rng: random.Random) -> list:
    goals = []
    for p in catalogue.products:
        for ins in p.human_instructions:
            if len(ins["instruction_attributes"]) == 0:
                continue            # the reference counts these as "skipped"
            upper, price_text = _price_upper(catalogue.prices[p.asin], rng)
            goals.append(dict(_base(p), instruction_text=ins["instruction"].strip(".") + price_text,
                              attributes=ins["instruction_attributes"], price_upper=upper,
                              goal_options=ins["instruction_options"], weight=1))
    return goals


GOAL_BUILDERS = {"synthetic": synthetic_goals, "human": human_goals}


def build_goals(catalogue, kind: str = "synthetic", seed: int = 0) -> list:
    if kind not in GOAL_BUILDERS:
        raise ValueError(f"goals={kind!r}; choose one of {sorted(GOAL_BUILDERS)}")
    goals = GOAL_BUILDERS[kind](catalogue, random.Random(seed))
    random.Random(SHUFFLE_SEED).shuffle(goals)
    return goals


def split_range(preset: str, split: str, n_goals: int) -> tuple:
    """[start, stop) of a split; 'all' is every goal."""
    if preset not in SPLITS:
        raise ValueError(f"preset={preset!r}; choose one of {sorted(SPLITS)}")
    if split == "all":
        return 0, n_goals
    if split not in SPLITS[preset]:
        raise ValueError(f"split={split!r} is not in preset {preset!r}; choose one of "
                         f"{sorted(SPLITS[preset]) + ['all']}")
    lo, hi = SPLITS[preset][split]
    hi = n_goals if hi is None else min(hi, n_goals)
    return min(lo, n_goals), hi
