"""RayVectorEnv against SyncVectorEnv on the same env_fns (all three envs), and its failure modes:
a killed worker, a stuck step, bad sizes. One small local Ray (``ray_local``, 2 CPUs) for the module."""
from __future__ import annotations

import os
import signal
import time
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

import bipace_envs  # noqa: F401  (registers the ids)
from agents.rollout import _indexed_env

pytest.importorskip("ray")
from bipace_envs.vector import EnvTimeoutError, EnvWorkerError, RayVectorEnv  # noqa: E402

NEXT = gym.vector.AutoresetMode.NEXT_STEP


def _alfworld(shared):
    pytest.importorskip("textworld")
    return partial(gym.make, "bipace/ALFWorld-v0", data_dir=str(shared / "data" / "alfworld"),
                   split="valid_seen", max_steps=4)


def _make(name, shared):
    if name == "textcraft":
        return partial(gym.make, "bipace/TextCraft-v0", max_steps=3)     # short: autoreset happens in the run
    if name == "webshop":
        return partial(gym.make, "bipace/WebShop-v0", max_steps=3)
    return _alfworld(shared)


def assert_same(a, b, path="infos"):
    """Merged infos equal key by key, ``_key`` masks included (object arrays compared element-wise)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert b.dtype == object and a.shape == b.shape, path
        for x, y in zip(a, b):
            assert_same(x, y, path)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), f"{path}: {a} != {b}"
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} != {b!r}"


def _play(envs, seeds, options, steps, rng_seed=0):
    """Reset, then step with admissible actions picked by a fixed RNG (every 4th a nonsense string)."""
    rng = np.random.default_rng(rng_seed)
    out = [envs.reset(seed=seeds, options=options)]
    infos = out[0][1]
    for t in range(steps):
        acts = []
        for i in range(envs.num_envs):
            adm = infos["admissible_actions"][i] if infos["_admissible_actions"][i] else None
            acts.append("jump around" if not adm or (t + i) % 4 == 3 else str(adm[rng.integers(len(adm))]))
        out.append(envs.step(acts))
        infos = out[-1][-1]
    return out


@pytest.mark.parametrize("name", ["textcraft", "webshop", "alfworld"])
def test_same_episodes_as_sync(name, ray_local, shared_dir):
    """Same seeds and per-env task ids -> identical observations, rewards, flags and merged infos,
    through NEXT_STEP autoresets (TextCraft and WebShop truncate at 3 steps, ALFWorld at 4)."""
    make = _make(name, shared_dir)
    n = 4 if name == "alfworld" else 5
    probe = make()
    # None: the env draws the task from the seed, as the collector allows
    own = ["stick", "chest", None, "lectern", "ladder"]
    tasks = own if name == "textcraft" else list(probe.unwrapped.task_ids)
    probe.close()
    task_ids = [tasks[(7 * k) % len(tasks)] for k in range(n)]
    fns = [partial(_indexed_env, make, i) for i in range(n)]
    opts = {"task_ids": task_ids}
    seeds = [11, 11, 12, 13, 14][:n]
    sync = gym.vector.SyncVectorEnv(fns, autoreset_mode=NEXT)
    ray_env = RayVectorEnv(fns, num_workers=2, cpus_per_worker=0.5)
    try:
        assert ray_env.blocks == ([[0, 1, 2], [3, 4]] if n == 5 else [[0, 1], [2, 3]])
        steps = 5
        a, b = _play(sync, seeds, opts, steps), _play(ray_env, seeds, opts, steps)
        assert any(r[3].any() for r in a[1:]), "the run should cross an episode end"
        for ra, rb in zip(a, b):
            assert list(ra[0]) == list(rb[0])               # observations
            for x, y in zip(ra[1:-1], rb[1:-1]):            # rewards, terminated, truncated
                assert x.dtype == y.dtype and np.array_equal(x, y)
            assert_same(ra[-1], rb[-1])
        assert ray_env.metadata["autoreset_mode"] == NEXT
        assert ray_env.single_action_space == sync.single_action_space
    finally:
        sync.close()
        ray_env.close()


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.DISABLED])
def test_other_autoreset_modes_and_reset_mask_match_sync(mode, ray_local, shared_dir):
    fns = [_make("textcraft", shared_dir)] * 3
    sync = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    ray_env = RayVectorEnv(fns, num_workers=2, cpus_per_worker=0.5, autoreset_mode=mode)
    try:
        for envs in (sync, ray_env):
            envs.reset(seed=5)
        outs = []
        for envs in (sync, ray_env):
            seq = [envs.step(["inventory"] * 3) for _ in range(3)]        # truncates at step 3
            mask = np.array([False, True, False])
            seq.append(envs.reset(seed=[None, 8, None], options={"reset_mask": mask}))
            outs.append(seq)
        for ra, rb in zip(*outs):
            assert list(ra[0]) == list(rb[0])
            assert_same(ra[-1], rb[-1])
        if mode == gym.vector.AutoresetMode.SAME_STEP:
            assert "final_obs" in outs[1][2][-1]
    finally:
        sync.close()
        ray_env.close()


def _pids_gone(pids, wait=15.0):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return True
        time.sleep(0.2)
    return False


def test_killed_worker_is_a_clear_error_and_close_frees_every_actor(ray_local, shared_dir):
    fns = [partial(_indexed_env, _make("textcraft", shared_dir), i) for i in range(4)]
    envs = RayVectorEnv(fns, num_workers=2, cpus_per_worker=0.5)
    pids = [w["pid"] for w in envs.worker_info]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    envs.reset(seed=0, options={"task_ids": ["stick", "chest", "lectern", "ladder"]})
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(EnvWorkerError, match=r"envs \[2, 3\], task ids \['lectern', 'ladder'\]"):
        envs.step(["inventory"] * 4)
    with pytest.raises(RuntimeError, match="unusable after an earlier failure"):
        envs.step(["inventory"] * 4)
    envs.close()
    assert _pids_gone(pids)
    assert ray_local.available_resources().get("CPU", 0) >= 2 - 1e-6 or _cpus_back(ray_local)


def _cpus_back(ray, wait=10.0):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0) >= 2 - 1e-6:
            return True
        time.sleep(0.2)
    return False


def test_restart_mode_replaces_the_worker_and_replays_its_envs(ray_local, shared_dir):
    fns = [partial(_indexed_env, _make("textcraft", shared_dir), i) for i in range(4)]
    envs = RayVectorEnv(fns, num_workers=2, cpus_per_worker=0.5, on_worker_death="restart")
    try:
        tasks = ["stick", "chest", "lectern", "ladder"]
        first, _ = envs.reset(seed=[1, 2, 3, 4], options={"task_ids": tasks})
        obs1, *_ = envs.step(["inventory"] * 4)
        old = envs.worker_info[0]["pid"]
        os.kill(old, signal.SIGKILL)
        with pytest.warns(RuntimeWarning, match=r"envs \[0, 1\], task ids \['stick', 'chest'\].*restarted"):
            obs2, rew, term, trunc, infos = envs.step(["inventory"] * 4)
        assert trunc.tolist() == [True, True, False, False] and not term.any()
        assert infos["_worker_restarted"].tolist() == [True, True, False, False]
        assert list(obs2[:2]) == list(obs1[:2])        # the cut episode ends on its last known observation
        assert envs.worker_info[0]["pid"] != old
        obs3, _, _, _, infos = envs.step(["inventory"] * 4)   # autoreset: the same task and seed again
        assert list(obs3[:2]) == list(first[:2]) and list(infos["task_id"][:2]) == ["stick", "chest"]
    finally:
        envs.close()


class _Stuck(gym.Wrapper):
    def step(self, action):
        if action == "hang":
            time.sleep(60)
        return self.env.step(action)


def _stuck_env():
    return _Stuck(gym.make("bipace/TextCraft-v0"))


def test_a_stuck_step_times_out_with_the_env_indices(ray_local):
    envs = RayVectorEnv([_stuck_env] * 3, num_workers=3, cpus_per_worker=0.5, step_timeout=2.0)
    pids = [w["pid"] for w in envs.worker_info]
    envs.reset(seed=0)
    t0 = time.monotonic()
    with pytest.raises(EnvTimeoutError, match=r"within 2 s from worker 1 \(pid \d+ on .*\): envs \[1\]"):
        envs.step(["inventory", "hang", "inventory"])
    assert time.monotonic() - t0 < 20
    t0 = time.monotonic()
    envs.close()
    assert time.monotonic() - t0 < 20 and _pids_gone(pids)


def test_bad_sizes_are_clear_errors(ray_local):
    fns = [partial(gym.make, "bipace/TextCraft-v0")] * 2
    with pytest.raises(ValueError, match="the Ray cluster has 2"):
        RayVectorEnv(fns, num_workers=2, cpus_per_worker=2)
    with pytest.raises(ValueError, match="num_workers must be >= 1"):
        RayVectorEnv(fns, num_workers=0)
    with pytest.raises(ValueError, match="on_worker_death"):
        RayVectorEnv(fns, on_worker_death="ignore")
    envs = RayVectorEnv(fns)                       # auto: one worker per CPU, at most one per env
    try:
        assert len(envs.workers) == 2 and envs.blocks == [[0], [1]]
        with pytest.raises(ValueError, match="only 0 of the cluster's 2 CPUs are free"):
            RayVectorEnv(fns, num_workers=1, cpus_per_worker=1)
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="one action per env"):
            envs.step(["inventory"])
        envs.step(["inventory"] * 2)
        assert all(b > 0 for b in envs.worker_busy_seconds())
        assert all(r > 10_000_000 for r in envs.worker_rss())
        assert envs.get_attr("spec")[0].id == "bipace/TextCraft-v0"
    finally:
        envs.close()
    assert _cpus_back(ray_local)
