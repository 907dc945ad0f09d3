"""A continuation starts from the scripted policy's own state, not only the env's: replaying a recorded
episode while asking the expert at every state gives back the suggestion the episode got at every step, on
each env; on a WebShop goal where the imitable oracle falls back to the goal product, a replay that does not
ask (the old continuations) follows another policy, which the check names."""
from __future__ import annotations

import numpy as np
import pytest

import bipace_envs  # noqa: F401  (registers the ids)
from agents.envs import get_env_spec
from agents.replay import Replay, ReplayPrefix, anchor_hash
from benchmarks.credit.scripted import PolicyStateMismatch, ScriptedPolicy, play_episode, replay_with_policy


def recorded_episode(env, spec, name, task, seed, eps=0.5, rng_seed=0):
    """One scripted episode with the anchors and suggestions of every state it acted in."""
    ep = play_episode(env, ScriptedPolicy(eps), name, spec, np.random.default_rng(rng_seed), task, seed,
                      spec.expert_reset_options, keep_states=True)
    anchors = tuple(anchor_hash(info.get("anchor", obs)) for obs, info in ep["states"])
    return ep, anchors


def check_every_prefix(env, spec, name, task, seed, ep, anchors):
    """Replay to every state of the episode: each replayed suggestion is the recorded one, and so is the
    suggestion in the state reached."""
    for t in range(len(ep["actions"])):
        replay = Replay(tuple(ep["actions"][:t]), anchors[:t + 1])
        _, _, checked = replay_with_policy(env, spec, name, task, seed, spec.expert_reset_options, replay,
                                           tuple(ep["suggestions"][:t]))
        assert checked == t
        plan = spec.expert(env)
        assert (plan[0] if plan else None) == ep["suggestions"][t], (name, task, t)


def test_textcraft_replays_the_policy_state():
    spec = get_env_spec("textcraft")
    env = ReplayPrefix(spec.make(max_steps=8, depths=(1,)))
    ep, anchors = recorded_episode(env, spec, "textcraft", "stick", 3)
    assert len(ep["actions"]) > 2
    check_every_prefix(env, spec, "textcraft", "stick", 3, ep, anchors)


@pytest.fixture(scope="module")
def webshop():
    spec = get_env_spec("webshop")
    env = ReplayPrefix(spec.make(split="train", max_steps=15))
    yield spec, env
    env.close()


def fallback_goal(spec, env):
    """A training goal on which the imitable oracle, played alone, falls back to the goal product."""
    for task in list(env.unwrapped.task_ids)[:200]:
        recorded_episode(env, spec, "webshop", task, 0, eps=0.0)
        if env.unwrapped.session.oracle_fell_back:
            return task
    pytest.fail("no goal among the first 200 training goals makes the oracle fall back")


def test_webshop_replays_the_oracle_s_fallback_and_a_plain_replay_does_not(webshop):
    spec, env = webshop
    task = fallback_goal(spec, env)
    for rng_seed in range(40):      # an episode that reaches the fallback and acts after it
        ep, anchors = recorded_episode(env, spec, "webshop", task, 0, eps=0.3, rng_seed=rng_seed)
        fell_back = env.unwrapped.session.oracle_fell_back
        if fell_back and len(ep["actions"]) >= 3:
            break
    else:
        pytest.fail(f"no eps-0.3 episode of goal {task} reached the oracle's fallback")
    check_every_prefix(env, spec, "webshop", task, 0, ep, anchors)
    # the old continuations replayed the actions without asking the oracle: its flag stayed False, and past
    # the fallback it suggests another action than it did in the episode
    differs = []
    for t in range(len(ep["actions"])):
        replay = Replay(tuple(ep["actions"][:t]), anchors[:t + 1])
        env.reset(seed=0, options={"task_id": task, "replay": replay})
        plan = spec.expert(env)
        differs.append((plan[0] if plan else None) != ep["suggestions"][t])
    assert any(differs), "a plain replay gave every recorded suggestion: the test goal shows nothing"
    t = differs.index(True)
    with pytest.raises(PolicyStateMismatch, match=rf"webshop: after replaying task {task!r} \(env seed 0\) "
                                                  rf"to step {t}, the scripted policy's expert suggests"):
        wrong = tuple(ep["suggestions"][:t]) + ("click[not this]",)
        replay_with_policy(env, spec, "webshop", task, 0, {}, Replay(tuple(ep["actions"][:t + 1]),
                                                                     anchors[:t + 2]), wrong)


def test_alfworld_replays_the_policy_state(tmp_path_factory):
    pytest.importorskip("alfworld")
    spec = get_env_spec("alfworld")
    env = ReplayPrefix(spec.make(split="train", games_per_task=1, max_steps=10,
                                 cache_dir=str(tmp_path_factory.mktemp("alfworld-policy-state"))))
    task = env.unwrapped.task_ids[0]
    ep, anchors = recorded_episode(env, spec, "alfworld", task, 5, eps=0.5)
    assert len(ep["actions"]) > 2
    check_every_prefix(env, spec, "alfworld", task, 5, ep, anchors)
    env.close()
