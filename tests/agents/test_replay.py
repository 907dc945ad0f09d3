"""Replay puts a collector's env back into a recorded state with the recorded history: a continuation's
first prompt is token for token the prompt the recorded episode had at that step."""
import numpy as np
import pytest
import torch

from agents.envs import get_env_spec
from agents.prompts import PromptSettings, make_prompter
from agents.replay import Replay, ReplayDivergence
from agents.rollout import RolloutCollector, RolloutSettings
from benchmarks.credit.mc_truth import episodes_of


def _env_kwargs(env_name, shared_dir):
    if env_name == "alfworld":
        return {"split": "valid_seen", "data_dir": str(shared_dir / "data" / "alfworld"), "task_types": [1]}
    return {"textcraft": {"preset": "agentgym", "depths": (1,)}, "webshop": {"split": "test"}}[env_name]


def _collector(tiny, n, env_name="textcraft", kwargs=None):
    model, tok = tiny
    spec = get_env_spec(env_name)
    kwargs = kwargs or _env_kwargs("textcraft", None)
    rs = RolloutSettings(max_steps=4, max_new_tokens=8, require_think=False, capture_hidden=False)
    return RolloutCollector(model, tok, lambda: spec.make(max_steps=4, **kwargs), n,
                            make_prompter(env_name, PromptSettings(history_length=2, require_think=False,
                                                                   compact=True, show_admissible=False)),
                            rs, spec.reward_map, fallback_chars=spec.fallback_chars)


@pytest.mark.parametrize("env_name", ["textcraft", "webshop", "alfworld"])
def test_a_replayed_state_gives_the_recorded_prompt(tiny, env_name, shared_dir):
    """Every env replays deterministically (the ground truth of advantage_accuracy needs it)."""
    kwargs = _env_kwargs(env_name, shared_dir)
    col = _collector(tiny, 2, env_name, kwargs)
    probe = get_env_spec(env_name).make(max_steps=4, **kwargs)
    tasks = (["stick", "oak_planks"] if env_name == "textcraft"
             else list(get_env_spec(env_name).tasks(probe, kwargs["split"]))[:2])
    probe.close()
    seeds = [5, 6]
    torch.manual_seed(0)
    ro = col.collect(tasks, seeds, [0, 1])
    episodes = episodes_of(ro, tasks, seeds)
    later = [(e, t) for e, ep in enumerate(episodes) for t in range(1, len(ep.rows))]
    assert later, "the episodes must last more than one step for this test"
    for e, t in later:
        torch.manual_seed(1)
        cont = col.collect([tasks[e]] * 2, [seeds[e]] * 2, [0, 1], replays=[episodes[e].replay(t)] * 2)
        first = np.flatnonzero((cont.env_index == 0) & (cont.batch.step_idx == 0))[0]
        assert torch.equal(cont.prompt_ids[first], ro.prompt_ids[episodes[e].rows[t]])
        # the continuation plays only what is left of the horizon
        assert cont.episode_length.max() <= 4 - t
    col.close()


def test_a_diverging_replay_is_refused(tiny):
    col = _collector(tiny, 1)
    ro = col.collect(["stick"], [5], [0])
    ep = episodes_of(ro, ["stick"], [5])[0]
    wrong = Replay(ep.actions[:1], ("0" * 40,) + ep.anchors[1:2])
    with pytest.raises(ReplayDivergence, match="recorded action"):
        col.collect(["stick"], [5], [0], replays=[wrong])
    with pytest.raises(ValueError, match="one replay"):
        col.collect(["stick"], [5], [0], replays=[None, None])
    col.close()
