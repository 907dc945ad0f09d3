"""The scripted stochastic policy of the credit benchmark: the env's own expert with probability 1 - eps, a
uniformly random admissible action otherwise, and the exact probability of every action it takes.

    policy = parse_policy("scripted:0.3")           # None for a model name or folder
    choice = policy.choose(env, info, rng, "webshop", spec.expert, where="for task 3 at step 2")
    choice.action, choice.logp, choice.suggestion  # what it did, log P(action | state), the expert's advice

``suggestion`` is the expert's first action in the state, asked before the draw: the batch records it per
step, and a continuation that replays the state asks again and must get the same answer
(``scripted.replay_with_policy``), since an expert may keep state of its own (WebShop's oracle, once it
finds no perfect product, follows the goal product for the rest of the episode).

The probability of an action a among the n admissible choices (a duplicated choice counts twice):
(1 - eps) [a = suggestion] + eps n(a) / n, where a template such as WebShop's ``search[...]`` counts as one
choice, filled at random (``fill_webshop_search``), so a filled query q has eps n(template) / n
P(fill = q) (``webshop_search_fill_prob``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

SCRIPTED = "scripted"
MAX_SEARCH_WORDS = 5


class ExpertCannotAct(RuntimeError):
    """The env's expert has no action in a state where the episode is not over."""


class Choice(NamedTuple):
    action: str
    logp: float                  # log-probability of ``action`` under the policy in this state
    suggestion: str | None       # the expert's first action here (None past a planner timeout)


@dataclass(frozen=True)
class ScriptedPolicy:
    """The env's expert with probability 1 - ``eps``, a uniformly random admissible action otherwise."""
    eps: float

    def __post_init__(self):
        if not (isinstance(self.eps, (int, float)) and 0.0 <= float(self.eps) <= 1.0):
            raise ValueError(f"a scripted policy's eps must lie in [0, 1] (the chance of a random admissible "
                             f"action instead of the expert's); got {self.eps!r}")

    @property
    def spec(self) -> str:
        return f"{SCRIPTED}:{self.eps:g}"

    def choose(self, env, info: dict, rng: np.random.Generator, env_name: str, expert, where: str,
               exclude: str | None = None) -> Choice:
        """The action taken in the env's current state, its log-probability and the expert's suggestion.
        With ``exclude``, the draw is conditioned on another action than that one (the stratum of a
        continuation whose first action must differ from the recorded one; ``strata.py``): the policy's
        draws are repeated until one differs, and ``logp`` stays the unconditioned probability."""
        plan = expert(env)
        choices = list(info.get("admissible_actions") or ())
        if not plan and info.get("expert_timed_out") and choices:
            # ALFWorld's planner ran past the env's planner_timeout: no expert action this episode, so
            # every remaining choice is uniform (the log-probability says so)
            if exclude is not None and set(choices) <= {exclude}:
                raise ValueError(f"{env_name}: no action but {exclude!r} {where}: nothing to condition on")
            choice = exclude
            while choice == exclude:
                choice = choices[int(rng.integers(len(choices)))]
            return Choice(choice, math.log(choices.count(choice) / len(choices)), None)
        if not plan:
            raise ExpertCannotAct(
                f"{env_name}'s expert has no action {where}, though the episode is not over; a scripted "
                "policy needs an expert that acts from every state the policy reaches (for ALFWorld: reset "
                "with options={'expert': True} so it watches the whole episode)")
        best = plan[0]
        templates = set(info.get("action_templates") or ())
        filler = TEMPLATE_FILLERS.get(env_name)
        if filler is None:
            choices = [a for a in choices if a not in templates]
        if not choices:
            choices = [best]
        if exclude is not None and self.probability(exclude, best, choices, templates, filler,
                                                    info) > 1 - 1e-9:
            raise ValueError(f"{env_name}: the policy takes {exclude!r} with probability 1 {where}: no other "
                             "action to condition on")
        action = exclude
        while action == exclude:
            if rng.random() < self.eps:
                choice = choices[int(rng.integers(len(choices)))]
                action = filler.fill(choice, info, rng) if choice in templates else choice
            else:
                action = best
            if exclude is None:
                break
        return Choice(action, math.log(max(self.probability(action, best, choices, templates, filler, info),
                                           1e-300)), best)

    def probability(self, action: str, best: str, choices: list, templates: set, filler, info: dict) -> float:
        """P(action) in a state with these choices: the expert's share plus every random way to it."""
        p = (1 - self.eps) * (action == best) + self.eps * choices.count(action) / len(choices)
        if filler is not None:
            for template in templates & set(choices):
                p += self.eps * choices.count(template) / len(choices) * filler.prob(action, info)
        return p


# ------------------------------------------------------------------------------------ templates
def _search_words(info: dict) -> list[str]:
    return str(info.get("instruction", "")).split() or ["item"]


def fill_webshop_search(template: str, info: dict, rng: np.random.Generator) -> str:
    """WebShop's ``search[...]`` with 1-5 of the instruction's words, kept in order (a noisy query): k drawn
    uniformly from 1..min(5, n), then k of the n words uniformly."""
    words = _search_words(info)
    k = int(rng.integers(1, min(MAX_SEARCH_WORDS, len(words)) + 1))
    keep = np.sort(rng.choice(len(words), k, replace=False))
    return "search[" + " ".join(words[i] for i in keep) + "]"


def _subsequence_count(words: list[str], query: list[str]) -> int:
    """In how many ways ``query`` is a subsequence of ``words`` (index sets, in order)."""
    ways = [1] + [0] * len(query)          # ways[j]: ways to match the first j query words so far
    for w in words:
        for j in range(len(query), 0, -1):
            if query[j - 1] == w:
                ways[j] += ways[j - 1]
    return ways[len(query)]


def webshop_search_fill_prob(action: str, info: dict) -> float:
    """P(``fill_webshop_search`` writes ``action``): P(k) times the share of k-word index sets whose words,
    in order, are the query's (repeated words make several sets write the same query)."""
    if not (action.startswith("search[") and action.endswith("]")):
        return 0.0
    words, query = _search_words(info), action[len("search["):-1].split()
    top = min(MAX_SEARCH_WORDS, len(words))
    k = len(query)
    if not 1 <= k <= top or " ".join(query) != action[len("search["):-1]:
        return 0.0
    return _subsequence_count(words, query) / math.comb(len(words), k) / top


class TemplateFiller(NamedTuple):
    fill: object                 # fill(template, info, rng) -> action
    prob: object                 # prob(action, info) -> P(fill writes action)


# how a random turn fills an action template the env lists (envs without one skip their templates)
TEMPLATE_FILLERS = {"webshop": TemplateFiller(fill_webshop_search, webshop_search_fill_prob)}


def parse_policy(spec: str) -> ScriptedPolicy | None:
    """``scripted:EPS`` -> ScriptedPolicy; a model name or folder (no ``kind:`` prefix) -> None."""
    spec = str(spec)
    kind, sep, rest = spec.partition(":")
    if not sep or Path(spec).exists():
        return None
    if kind != SCRIPTED:
        raise ValueError(f"unknown policy spec {spec!r}: use scripted:EPS (the env's expert, a random "
                         "admissible action with probability EPS) or a model name or folder")
    try:
        eps = float(rest)
    except ValueError:
        raise ValueError(f"policy spec {spec!r}: EPS must be a number in [0, 1], e.g. scripted:0.3") from None
    return ScriptedPolicy(eps)
