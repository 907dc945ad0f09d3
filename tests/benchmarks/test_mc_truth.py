"""The Monte-Carlo ground truth of advantage_accuracy, validated where the truth is exact: on a text MDP
its Q, V and A match dynamic programming within their standard errors, and replay refuses an env that
does not reproduce the recorded observations."""
import numpy as np
import pytest

from agents.replay import Replay, ReplayDivergence, ReplayPrefix, anchor_hash
from benchmarks.credit.mc_truth import (ContinuationStore, Episode, expert_advantage, expert_values,
                                        mc_truth, plan_starts, run_continuations)
from benchmarks.credit.text_mdp import TextMDPEnv, make_world, solve

HORIZON, GAMMA = 8, 0.9


def _world():
    return make_world(np.random.default_rng(3), n_rooms=4, stuck_prob=0.0)


def _record(world, n_episodes, rng):
    """Episodes of the world's own policy, as a rollout records them (one row per step)."""
    env, episodes, latent, rewards, row = TextMDPEnv(world, HORIZON), [], [], [], 0
    for e in range(n_episodes):
        obs, info = env.reset(seed=0)
        actions, anchors, rows = [], [], []
        while True:
            s = info["latent"]
            a = world.actions(s)[rng.choice(len(world.actions(s)), p=world.policy(s))]
            anchors.append(anchor_hash(info["anchor"]))
            latent.append((info["t"], s, world.actions(s).index(a)))
            obs, r, term, trunc, info = env.step(a)
            actions.append(a)
            rows.append(row)
            rewards.append(r)
            row += 1
            if term or trunc:
                break
        episodes.append(Episode(0, 0, tuple(actions), tuple(anchors), tuple(rows)))
    return episodes, latent, np.array(rewards)


class PolicyPlay:
    """Continuations with the world's policy from replayed states (what the LLM collector does)."""

    def __init__(self, world, paraphrases=1, seeded=True):
        self.world, self.env = world, ReplayPrefix(TextMDPEnv(world, HORIZON, paraphrases, seeded))

    def __call__(self, jobs, chunk_seed):
        rng, out = np.random.default_rng(chunk_seed), []
        for task, seed, replay, t in jobs:
            _, info = self.env.reset(seed=seed, options={"replay": replay})
            rewards = []
            while True:
                s = info["latent"]
                acts = self.world.actions(s)
                _, r, term, trunc, info = self.env.step(acts[rng.choice(len(acts), p=self.world.policy(s))])
                rewards.append(r)
                if term or trunc:
                    break
            out.append((rewards, [True] * len(rewards), bool(term)))
        return out


def test_mc_values_recover_the_exact_dp_values(tmp_path):
    world = _world()
    V, Q = solve(world, HORIZON, GAMMA)
    episodes, latent, rewards = _record(world, 6, np.random.default_rng(1))
    plan = plan_starts(episodes)
    assert len(plan.starts) < len(rewards)          # the episodes share s_0 (and maybe more): dedupe works
    store = ContinuationStore(tmp_path / "c.jsonl")
    run_continuations(plan, 300, PolicyPlay(world), store, chunk=500, gamma=GAMMA, progress=False)
    truth = mc_truth(plan, store, rewards, np.ones(len(rewards), bool), GAMMA, 0.0)
    exact_a = np.array([Q[t, s, a] - V[t, s] for t, s, a in latent])
    exact_v = np.array([V[t, s] for t, s, _ in latent])
    noisy = truth.win_rate > 0           # late states that can no longer win have V = 0 in every sample
    assert noisy.mean() > 0.3
    assert np.allclose(truth.adv[~noisy], exact_a[~noisy]) and np.allclose(truth.v[~noisy], exact_v[~noisy])
    z_a = (truth.adv - exact_a)[noisy] / truth.se[noisy]
    z_v = (truth.v - exact_v)[noisy] / truth.se[noisy]
    assert np.all(np.abs(z_a) < 4.5) and np.all(np.abs(z_v) < 4.5)
    assert np.mean(np.abs(z_a) < 2) > 0.8                 # about 95% of rows within two standard errors
    assert np.corrcoef(truth.adv, exact_a)[0, 1] > 0.9
    # resuming: a second call with the same K samples nothing more
    n = store.total()
    run_continuations(plan, 300, PolicyPlay(world), ContinuationStore(tmp_path / "c.jsonl"), chunk=500,
                      gamma=GAMMA, progress=False)
    assert ContinuationStore(tmp_path / "c.jsonl").total() == n


def test_a_wrong_sample_breaks_the_check():
    """The same comparison must fail when the continuations come from another policy (the test can fail)."""
    world = _world()
    V, Q = solve(world, HORIZON, GAMMA)
    episodes, latent, rewards = _record(world, 4, np.random.default_rng(2))
    plan = plan_starts(episodes)
    other = make_world(np.random.default_rng(3), n_rooms=4, stuck_prob=0.0, noise=3.0)
    store = ContinuationStore.__new__(ContinuationStore)
    store.path, store.samples = None, {}
    store.add = lambda recs: [store.samples.setdefault(r["key"], []).append(r) for r in recs]
    run_continuations(plan, 300, PolicyPlay(other), store, chunk=500, gamma=GAMMA, progress=False)
    truth = mc_truth(plan, store, rewards, np.ones(len(rewards), bool), GAMMA, 0.0)
    exact_v = np.array([V[t, s] for t, s, _ in latent])
    noisy = truth.se > 0
    assert np.max(np.abs(truth.v - exact_v)[noisy] / truth.se[noisy]) > 4.5


def test_replay_refuses_an_env_that_does_not_reproduce_its_observations():
    world = make_world(np.random.default_rng(3), n_rooms=4, stuck_prob=0.0)
    episodes, _, _ = _record(world, 1, np.random.default_rng(1))
    ep = episodes[0]
    assert len(ep.actions) > 1
    env = ReplayPrefix(TextMDPEnv(world, HORIZON, paraphrases=4, seeded=False))   # paraphrases from entropy
    with pytest.raises(ReplayDivergence, match="does not replay deterministically"):
        for _ in range(20):        # fresh draws differ from the recorded text on nearly every try
            env.reset(seed=0, options={"replay": ep.replay(len(ep.actions) - 1)})
    plain = ReplayPrefix(TextMDPEnv(world, HORIZON))
    obs, info = plain.reset(seed=0, options={"replay": ep.replay(1)})
    assert [a for _, a in info["replay_history"]] == [ep.actions[0]] and info["t"] == 1


def test_a_replay_needs_its_anchor_hashes():
    with pytest.raises(ValueError, match="anchor"):
        Replay(("look", "look"), ("h0",))


def test_expert_advantage_of_the_best_action_is_zero(tmp_path):
    """QVal's view: an action on the expert's route keeps the expert's value (A^E = 0), others lose."""
    world = _world()
    V, _ = solve(world, HORIZON, GAMMA)
    episodes, latent, rewards = _record(world, 3, np.random.default_rng(4))
    plan = plan_starts(episodes)

    def greedy(env):       # the route the policy prefers most: a deterministic stand-in expert
        s = env.unwrapped.s
        return [world.actions(s)[int(np.argmax(world.prefs[s]))]]

    w = expert_values(plan, lambda: TextMDPEnv(world, HORIZON), greedy, lambda r, term, info: r, GAMMA)
    adv = expert_advantage(plan, w, rewards, np.ones(len(rewards), bool), GAMMA, 0.0)
    chose_greedy = np.array([a == int(np.argmax(world.prefs[s])) for _, s, a in latent])
    assert np.allclose(adv[chose_greedy], 0.0)
    assert np.all(np.isfinite(adv))


def test_a_policy_folder_keeps_the_prompts_of_its_presets_model(tmp_path):
    """A warm start's folder plays with the prompts its model was trained on (the compare preset leaves
    think tags and compact prompts on "auto", which follow the model's name)."""
    from agents.presets import get_preset
    from benchmarks.credit.advantage_accuracy import with_policy
    cfg = get_preset("compare")
    played = with_policy(cfg, str(tmp_path / "warm_start"), tmp_path / "policy")
    assert played.model == str(tmp_path / "warm_start")
    assert (played.think_required(), played.compact()) == (cfg.think_required(), cfg.compact())
    assert cfg.require_think == "auto"      # the case this guards: auto resolved by the model's name


def test_agreeing_samples_keep_a_standard_error_floor():
    """K continuations that all lose (or all win) leave a state's value uncertain: its SE is the Beta(1, 1)
    win-rate floor, never 0, and the advantage's SE, the sign set and the purity test inherit it."""
    from benchmarks.credit.mc_truth import se_floor
    ep = Episode("g", 0, ("a", "b"), ("h0", "h1"), (0, 1))
    plan = plan_starts([ep])
    store = ContinuationStore.__new__(ContinuationStore)
    store.path, store.samples = None, {}
    store.samples[plan.keys[0]] = [{"key": plan.keys[0], "disc": 0.0, "invalid": False, "won": False}] * 8
    store.samples[plan.keys[1]] = [{"key": plan.keys[1], "disc": 10.0, "invalid": False, "won": True}] * 7 + [
        {"key": plan.keys[1], "disc": 0.0, "invalid": False, "won": False}]
    truth = mc_truth(plan, store, np.zeros(2), np.ones(2, bool), GAMMA, 0.0, se="floor")     # the old rule
    floor = se_floor(np.array([0.0]), np.array([8.0]), 10.0)[0]
    assert floor > 0 and truth.se_start[0] == pytest.approx(floor)
    assert truth.se_start[0] == pytest.approx(10 * np.sqrt((1 / 10) * (9 / 10) / 8))
    sample_se = 10 * np.std([1] * 7 + [0], ddof=1) / np.sqrt(8)          # above the floor: kept
    floor_7 = se_floor(np.array([7.0]), np.array([8.0]), 10)[0]
    assert truth.se_start[1] == pytest.approx(max(sample_se, floor_7))
    assert np.all(truth.se > 0)
