"""SFT augmentation: renamed TextCraft examples stay consistent, and exploration adds recovery steps."""
import re

import numpy as np
import pytest

from agents.augment import TextCraftRenamer, make_augmenter
from agents.envs import get_env_spec
from agents.prompts import PromptSettings, make_prompter
from agents.sft import expert_examples
from fake_env import FakeCraftEnv

PROMPT = ("Crafting commands:\ncraft 4 dark oak planks using 1 dark oak log\ncraft 4 oak planks using 1 oak log\n"
          "\nGoal: craft dark oak planks.\n[Observation 1: 'Crafted 4 minecraft:oak_planks', Action 1: 'get 1 oak log']")
RESPONSE = "<action>get 1 dark oak log</action><|im_end|>"


def test_renaming_is_consistent_between_prompt_and_answer_and_across_forms():
    rename = make_augmenter("textcraft")
    p, r = rename(np.random.default_rng(0), PROMPT, RESPONSE)
    new_log = re.fullmatch(r"<action>get 1 (.+)</action><\|im_end\|>", r).group(1)
    assert new_log != "dark oak log"
    lines = p.splitlines()
    goal = re.fullmatch(r"Goal: craft (.+)\.", lines[4]).group(1)
    assert lines[1] == f"craft 4 {goal} using 1 {new_log}"          # the goal's line names the answer's item
    other = re.fullmatch(r"craft 4 (.+) using 1 (.+)", lines[2])
    assert len({goal, new_log, other.group(1), other.group(2)}) == 4  # distinct names stay distinct
    assert f"minecraft:{other.group(1).replace(' ', '_')}'" in p       # the underscored form follows
    assert f"Action 1: 'get 1 {other.group(2)}'" in p
    assert p.count("Goal: craft") == 1 and "Crafting commands:" in p


def test_renaming_leaves_text_without_items_alone_and_is_seeded():
    rename = make_augmenter("textcraft")
    assert rename(np.random.default_rng(0), "Inventory: You are not carrying anything.", "<action>inventory</action>") \
        == ("Inventory: You are not carrying anything.", "<action>inventory</action>")
    assert rename(np.random.default_rng(3), PROMPT, RESPONSE) == rename(np.random.default_rng(3), PROMPT, RESPONSE)


def test_held_out_names_are_never_drawn():
    rename = TextCraftRenamer(exclude=["minecraft:oak_planks", "stick"])
    assert "oak planks" not in rename.pool and "stick" not in rename.pool
    rng = np.random.default_rng(0)
    drawn = set()
    for _ in range(300):
        p, r = rename(rng, "craft 4 stick using 2 oak planks", "<action>get 2 oak planks</action>")
        made, used = re.fullmatch(r"craft 4 (.+) using 2 (.+)", p).groups()
        assert r == f"<action>get 2 {used}</action>"
        drawn |= {made, used}
    assert len(drawn) > 100 and not drawn & {"stick", "oak planks"}


def test_unknown_env_has_no_augmenter():
    with pytest.raises(ValueError, match="no SFT augmentation"):
        make_augmenter("webshop")


def test_exploration_adds_detours_that_are_not_targets(tiny):
    _, tok = tiny
    spec = get_env_spec("textcraft")
    prompter = make_prompter("textcraft", PromptSettings(require_think=False, history_length=2))
    plain = expert_examples(spec, lambda: FakeCraftEnv(max_steps=6), list(range(8)), prompter, tok, max_steps=6)
    explored = expert_examples(spec, lambda: FakeCraftEnv(max_steps=6), list(range(8)), prompter, tok, max_steps=6,
                               seed=1, explore=0.5)
    detoured = [e for e in explored if "Action 1: '" in e.prompt and e not in plain]
    assert detoured, "exploration should put some non-expert actions into the history"
    for e in explored:          # every target is still an expert action of the fake env (get the ingredient, craft)
        assert re.fullmatch(r"<action>(get 1 .+|craft 1 .+ using 1 .+)</action><\|im_end\|>", e.response)
    with pytest.raises(ValueError, match="explore"):
        expert_examples(spec, lambda: FakeCraftEnv(), [0], prompter, tok, max_steps=2, explore=1.0)
