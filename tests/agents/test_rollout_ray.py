"""The trainer's rollouts through RayVectorEnv (``--vector-mode ray``) equal the sync ones."""
import numpy as np
import pytest

from agents.config import TrainConfig, parse_config
from agents.trainer import Trainer

pytest.importorskip("ray")


def _trainer(tmp_path, mode, **kw):
    cfg = TrainConfig(env="textcraft", estimator="gigpo", model="tiny", out_dir=str(tmp_path / mode),
                      env_kwargs='{"preset": "agentgym", "depths": [1]}', batch_tasks=2, group_size=2,
                      max_new_tokens=6, max_steps=3, iterations=1, eval_tasks=2, eval_batch=2, lora_rank=4,
                      lora_alpha=8, tensorboard=False, progress=False, vector_mode=mode, **kw)
    return Trainer(cfg)


def test_trainer_rollouts_on_ray_equal_sync(tmp_path, ray_local):
    from ray import cloudpickle
    from bipace_envs.vector import RayVectorEnv
    sync, on_ray = _trainer(tmp_path, "sync"), _trainer(tmp_path, "ray", ray_workers=2)
    # the env maker travels to every worker: it must not drag the trainer (and its model) along
    assert len(cloudpickle.dumps(on_ray.make_env)) < 20_000
    try:
        a, _ = sync.rollout(1)
        b, _ = on_ray.rollout(1)
        envs = on_ray.collector("train").envs
        assert isinstance(envs, RayVectorEnv) and len(envs.workers) == 2
        assert a.actions == b.actions and a.responses == b.responses
        assert list(a.batch.anchor) == list(b.batch.anchor)
        assert np.array_equal(a.batch.reward, b.batch.reward) and np.array_equal(a.success, b.success)
        assert np.array_equal(a.episode_length, b.episode_length)
    finally:
        for tr in (sync, on_ray):
            for col in tr._collectors.values():
                col.close()
    assert ray_local.is_initialized()      # the fixture's Ray is not this env's to shut down


def test_cli_has_the_ray_options():
    cfg = parse_config(["--vector-mode", "ray", "--ray-address", "auto", "--ray-workers", "3"])
    assert (cfg.vector_mode, cfg.ray_address, cfg.ray_workers) == ("ray", "auto", 3)
