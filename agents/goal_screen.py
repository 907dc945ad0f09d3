"""The goal screen: which training goals RL should sample, from a warm start's wins on each.

    from agents.goal_screen import screen_choice
    goals = screen_choice(screen_by_task, min_ingredients=2, also_simpler=8)   # {goal: [won, episodes]} in

A group whose G episodes all fail (or all win) has no episode-level signal, so RL learns only on goals the
policy sometimes wins. ``benchmarks.learning.train_table`` plays every training goal with the warm start once
(its screen), then RL samples the goals this returns: those won at least once, of recipes needing at least
``min_ingredients`` distinct ingredients (TextCraft; ``bipace_envs.textcraft.goals``), plus
``also_simpler`` won goals needing fewer. Trained on multi-ingredient goals alone, a policy learned to get
another item after every get and lost goals won by crafting right away; the simpler ones keep that habit
in check. The same idea as DAPO's online prompt filtering, done once ahead of the runs.
"""
from __future__ import annotations

import numpy as np


def screen_choice(by_task: dict, min_ingredients: int = 1, also_simpler: int = 0) -> set[str]:
    """The goals of ``by_task`` ({goal: [won, episodes]}) RL samples: won at least once and needing
    ``min_ingredients``+ ingredients, plus ``also_simpler`` of the won goals needing fewer (a fixed draw
    among those with a single recipe, the same every call)."""
    from bipace_envs.textcraft.goals import goal_ingredients, single_recipe_goals
    shapes = goal_ingredients() if min_ingredients > 1 else {}
    won = sorted(g for g, (wins, _) in by_task.items() if wins > 0)
    chosen = {g for g in won if shapes.get(g, 1) >= min_ingredients}
    if also_simpler > 0 and min_ingredients > 1:
        single = single_recipe_goals()
        simpler = [g for g in won if shapes.get(g, 1) < min_ingredients and g in single]
        pick = np.random.default_rng(0).choice(simpler, min(also_simpler, len(simpler)), replace=False)
        chosen |= {str(g) for g in pick}
    return chosen
