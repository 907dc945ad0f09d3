"""agents/task_sampling.py: which training tasks an iteration draws (uniform, or favouring mixed outcomes)."""
import numpy as np
import pytest

from agents.task_sampling import TaskTally, mixed_outcome_weights, pick_tasks


def test_weights_favour_tasks_whose_groups_mix_wins_and_losses():
    tally = TaskTally(4)
    tally.add([0] * 6 + [1] * 6 + [2] * 6, [1] * 6 + [1, 0, 1, 0, 1, 0] + [0] * 6)
    w = mixed_outcome_weights(tally)
    assert w[3] == 1.0                           # never played: the most to learn about
    assert w[1] == pytest.approx(1.0)            # won half its episodes
    assert w[0] == pytest.approx(w[2]) == pytest.approx(4 * (7 / 8) * (1 / 8))   # always won / always lost
    tally.add([0] * 6, [1] * 6)
    assert mixed_outcome_weights(tally)[0] < w[0]       # won again: drawn ever less, never excluded
    assert mixed_outcome_weights(tally)[0] > 0


def test_uniform_keeps_the_draw_of_runs_made_before_task_sampling():
    picked = pick_tasks("uniform", np.random.default_rng([3, 1]), TaskTally(16), 8)
    assert picked.tolist() == np.random.default_rng([3, 1]).choice(16, 8, replace=False).tolist()
    assert len(pick_tasks("uniform", np.random.default_rng(0), TaskTally(3), 8)) == 8   # fewer tasks: repeats


def test_mixed_draws_distinct_tasks_mostly_the_uncertain_ones():
    tally = TaskTally(10)
    tally.add(np.repeat(np.arange(5), 40), np.ones(200))        # tasks 0-4 won 40 of 40 times
    rng = np.random.default_rng(0)
    draws = [pick_tasks("mixed", rng, tally, 4) for _ in range(300)]
    assert all(len(set(d.tolist())) == 4 for d in draws)
    counts = np.bincount(np.concatenate(draws), minlength=10)
    # weight 1 against 4 p (1 - p) = 0.09 each; drawn without replacement, so less than 11x as often
    assert counts[5:].sum() > 5 * counts[:5].sum()
    assert counts[:5].sum() > 0


def test_unknown_sampler_and_a_tally_of_other_tasks_are_refused():
    with pytest.raises(ValueError, match="task_sampling must be one of uniform | mixed, got 'greedy'"):
        pick_tasks("greedy", np.random.default_rng(0), TaskTally(2), 1)
    with pytest.raises(ValueError, match="other training tasks"):
        TaskTally(3, wins=[0, 1], episodes=[1, 1])
