"""Goal generation rules on the generated catalogue: formats, price bound, weights, hash-seed
independence."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from bipace_envs.webshop.env import generated_catalogue
from bipace_envs.webshop.goals import PRICE_RANGE, build_goals


@pytest.fixture(scope="module")
def catalogue():
    return generated_catalogue(2000, 0, 0)


def test_synthetic_goal_format_and_price_rule(catalogue):
    goals = build_goals(catalogue, "synthetic", seed=0)
    per_product = Counter(g["asin"] for g in goals)
    for asin, n in per_product.items():
        p = catalogue.by_asin[asin]
        combos = 1
        for values in p.options.values():
            combos *= len(values)
        assert n == combos                                     # one goal per option combination
    for g in goals[:500]:
        p = catalogue.by_asin[g["asin"]]
        above = [x for x in PRICE_RANGE if x > catalogue.prices[g["asin"]]][:4]
        assert g["price_upper"] in above[1:]                   # the larger of two distinct draws
        opts = ", and ".join(f"{k}: {v}" for k, v in g["goal_options"].items())
        want = p.instruction_text + (f" with {opts}" if opts else "") + \
            f", and price lower than {g['price_upper']:.2f} dollars"
        assert g["instruction_text"] == want
        assert list(g["goal_options"]) == sorted(p.options)


def test_synthetic_weights(catalogue):
    goals = build_goals(catalogue, "synthetic", seed=0)
    uses = Counter(a for g in goals for a in g["attributes"])
    g = goals[0]
    assert g["weight"] == pytest.approx(sum(1 / uses[a] for a in g["attributes"]) / len(g["attributes"]))


def test_human_goals_format(catalogue):
    goals = build_goals(catalogue, "human", seed=0)
    n_raw = sum(len(p.human_instructions) for p in catalogue.products)
    n_empty = sum(not ins["instruction_attributes"]
                  for p in catalogue.products for ins in p.human_instructions)
    assert len(goals) == n_raw - n_empty > 1500               # empty-attribute instructions skipped
    g = goals[0]
    ins = next(i for i in catalogue.by_asin[g["asin"]].human_instructions
               if g["instruction_text"].startswith(i["instruction"].strip(".")))
    assert g["goal_options"] == ins["instruction_options"] and g["weight"] == 1


def test_generation_independent_of_hash_seed():
    code = ("import hashlib, json; from bipace_envs.webshop.generate import generate_raw; "
            "print(hashlib.sha1(json.dumps(generate_raw(300, 1)).encode()).hexdigest())")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    from bipace_envs.webshop.generate import generate_raw
    here = hashlib.sha1(json.dumps(generate_raw(300, 1)).encode()).hexdigest()
    assert outs == {here + "\n"}
