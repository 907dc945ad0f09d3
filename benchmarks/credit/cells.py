"""Named settings of the credit benchmark: how much it plays (``Size``) and the env x policy cells of the
leaderboard in docs/advantage-accuracy.md (``CELLS``), each reproduced by one command:

    python -m benchmarks.credit.advantage_accuracy --cell alfworld-eps0.5 --out runs/aa_alfworld-eps0.5

A cell fills every flag it names that the command line leaves out; sizes are argued in
docs/advantage-accuracy.md ("Sizing").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    """How much the benchmark plays: B goals x G episodes, K continuations per distinct state, and the
    screen's episodes per candidate goal and how many candidates it plays (0 = all), and how the truth
    samples. Named per training preset (``SIZES``) or per cell; flags override."""
    tasks: int
    group_size: int
    samples: int
    screen_repeats: int
    candidates: int = 0
    truth: str = "plain"
    """How the Monte-Carlo truth samples: "plain" (K continuations per distinct state) or "strata" (K per
    distinct state and recorded action, the policy's own probabilities as a control variate: scripted
    policies only; ``strata.py``)."""


SIZES = {
    # the TextCraft table's policy and settings; sized in docs/advantage-accuracy.md
    "textcraft-table": Size(tasks=12, group_size=6, samples=8, screen_repeats=2),
    # bipace-compare's stage: about 15 minutes on 2 cores (sized in docs/advantage-accuracy.md)
    "compare": Size(tasks=8, group_size=4, samples=4, screen_repeats=2, candidates=40),
}
DEFAULT_SIZE = SIZES["textcraft-table"]


@dataclass(frozen=True)
class Cell:
    """One env x policy column of the leaderboard."""
    preset: str
    """The RL settings whose env, prompts, horizon, estimator options and model (the embedding) it uses."""
    policy: str
    """``scripted:EPS`` (the env's expert, a random admissible action with probability EPS) or "" for the
    preset's default model policy (TextCraft: the table's warm start)."""
    size: Size
    ingredients: str = ""
    """TextCraft only: goals whose recipe needs "1" or "2+" distinct ingredients."""
    sets: tuple = ()
    """``FIELD=VALUE`` overrides of the preset."""
    splits: tuple = ()
    """The splits whose goals are candidates (default the preset's training split)."""
    batches: tuple = ()
    """The committed batches (folders relative to the repository's root): what ``bipace-compare`` checks a
    rerun against, and whose goals a rerun on disjoint goals leaves out."""
    column: str = ""
    """The committed folder the leaderboard shows (the batches' pool where there are several; default the
    only batch)."""
    replication: str = "disjoint"
    """How a rerun replicates it: "disjoint" (a new seed on goals outside every committed batch, pooled
    with them where they agree) or "same-goals" (a new seed on the committed goals: new episodes and
    truth, the same goals, so it is compared, never pooled), for a cell whose candidates are too few for
    another batch."""

    @property
    def shown(self) -> str:
        """The folder of the leaderboard's column."""
        return self.column or (self.batches[0] if self.batches else "")


# Scripted cells: eps chosen so that 20-80% of screen episodes are won (calibration in the docs); sizes so
# that a paired difference of 0.05 in Pearson r lies outside its 95% interval (the docs' "Sizing"). The
# truth samples strata (the policy's own probabilities as a control variate), K per stratum as measured by
# noise_study.py: on TextCraft eps 0.8 strata at K = 8 reach the reliability plain continuations reach at
# about K = 24, and continuations cost seconds there and on WebShop, so K = 32 (reliability 0.93)
TEXTCRAFT_SCRIPTED = Size(tasks=20, group_size=6, samples=32, screen_repeats=4, truth="strata")
WEBSHOP_SCRIPTED = Size(tasks=16, group_size=8, samples=32, screen_repeats=4, candidates=60, truth="strata")
# ALFWorld: the preset's G=4 and more goals instead (intervals are over goals); 80 candidates for 16 goals
# with mixed outcomes; continuations are most of a cell (about 20 a second), so K = 12 strata: the
# reliability target of 0.6 inside 45 minutes (docs/advantage-accuracy.md, "The truth's noise")
ALFWORLD_SCRIPTED = Size(tasks=16, group_size=4, samples=12, screen_repeats=2, candidates=80, truth="strata")
# at eps 0.5 more of a state's continuations branch at random: K = 12 left a reliability of 0.58 (0.56
# split-half) in 38 min; noise falls as 1/K, so K = 14: measured 0.61 and 0.63 in 43 and 39 min
ALFWORLD_SCRIPTED_EPS05 = dataclasses.replace(ALFWORLD_SCRIPTED, samples=14)
# one Fast Downward search took 387 s on a real game: past 10 s the episode's choices turn uniform
ALFWORLD_SETS = ('env_kwargs={"games_per_task": 20, "planner_timeout": 10}',)

# where the committed cells live (relative to the repository's root); the first truth's are in git history
FIRST_TRUTH, TRUTH = "docs/results/advantage-accuracy", "docs/results/truth-v2"


def _committed(name: str, second: bool = False) -> dict:
    """The committed batch of cell ``name`` (and its second batch on disjoint goals, seed 11, pooled)."""
    if not second:
        return {"batches": (f"{TRUTH}/{name}",)}
    return {"batches": (f"{TRUTH}/{name}", f"{TRUTH}/{name}-b"), "column": f"{TRUTH}/{name}-pooled"}


CELLS = {
    # the SmolLM2 warm start's own rows: two batches on disjoint goals, pooled (the first truth's plain K = 8)
    "textcraft-smollm2": Cell("textcraft-table", "", SIZES["textcraft-table"], ingredients="2+",
                              batches=(f"{FIRST_TRUTH}/aa_tc_2plus", f"{FIRST_TRUTH}/aa_tc_2plus_b"),
                              column=f"{FIRST_TRUTH}/aa_tc_2plus_pooled", replication="same-goals"),
    # the same goal population (depth 1, 2+ ingredients, training and held-out goals), scripted policies;
    # 20 of its 23 goals make a batch, so a rerun replays the same goals with a new seed
    "textcraft-eps0.5": Cell("textcraft-table", "scripted:0.5", TEXTCRAFT_SCRIPTED, ingredients="2+",
                             splits=("train", "test"), replication="same-goals",
                             **_committed("textcraft-eps0.5")),
    "textcraft-eps0.8": Cell("textcraft-table", "scripted:0.8", TEXTCRAFT_SCRIPTED, ingredients="2+",
                             splits=("train", "test"), replication="same-goals",
                             **_committed("textcraft-eps0.8")),
    "webshop-eps0.3": Cell("webshop-table", "scripted:0.3", WEBSHOP_SCRIPTED,
                           **_committed("webshop-eps0.3", second=True)),
    "webshop-eps0.5": Cell("webshop-table", "scripted:0.5", WEBSHOP_SCRIPTED,
                           **_committed("webshop-eps0.5", second=True)),
    "alfworld-eps0.3": Cell("alfworld-table", "scripted:0.3", ALFWORLD_SCRIPTED, sets=ALFWORLD_SETS,
                            **_committed("alfworld-eps0.3", second=True)),
    "alfworld-eps0.5": Cell("alfworld-table", "scripted:0.5", ALFWORLD_SCRIPTED_EPS05, sets=ALFWORLD_SETS,
                            **_committed("alfworld-eps0.5", second=True)),
}
