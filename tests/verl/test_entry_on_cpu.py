"""What of the verl launch runs without GPUs: the example config composes over verl's own and passes our
checks, the agent-loop yaml points at the loop, the task runner is verl's, dataset rows round-trip."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra: pip install -e \".[verl]\"")
import pandas as pd  # noqa: E402  (a verl dependency)
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import get_class  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from agents.verl_bridge import main as bridge_main  # noqa: E402
from agents.verl_bridge.agent_loop import BipaceEnvAgentLoop, task_of  # noqa: E402
from agents.verl_bridge.dataset import main as dataset_main  # noqa: E402
from agents.verl_bridge.trainer import estimator_options  # noqa: E402
from estimators import resolve_options  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "verl"


def example_config(*overrides):
    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        loop_yaml = f"actor_rollout_ref.rollout.agent.agent_loop_config_path={bridge_main.AGENT_LOOP_YAML}"
        return compose("alfworld_qwen1.5b", overrides=[loop_yaml, *overrides])


def test_example_config_composes_over_verls_and_passes_our_checks():
    cfg = example_config()
    bridge_main.check_config(cfg)
    assert cfg.trainer.v1.trainer_mode == "sync" and cfg.trainer.use_v1
    assert cfg.actor_rollout_ref.rollout.response_length == 512      # verl's interpolation from data.*
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "bipace_env"
    assert resolve_options(cfg.algorithm.adv_estimator, **estimator_options(cfg)).gamma == 0.95
    # verl's keys we did not set keep verl's defaults (the example only overrides)
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is not None


def test_checks_name_what_to_set():
    with pytest.raises(ValueError, match="trainer.use_v1=true"):
        bridge_main.check_config(example_config("trainer.use_v1=false"))
    with pytest.raises(ValueError, match="set trainer.v1.trainer_mode=sync"):
        bridge_main.check_config(example_config("algorithm.adv_estimator=pace",
                                                "trainer.v1.trainer_mode=bipace_sync"))
    with pytest.raises(ValueError, match="set trainer.v1.trainer_mode=sync"):
        bridge_main.check_config(example_config("trainer.v1.trainer_mode=colocate_async"))
    with pytest.raises(ValueError, match="bypass_mode=True skips that forward"):
        bridge_main.check_config(example_config("algorithm.adv_estimator=bipace",
                                                "algorithm.rollout_correction.bypass_mode=true"))
    bridge_main.check_config(example_config("algorithm.adv_estimator=bipace"))     # the forward runs: fine
    with pytest.raises(ValueError, match="agent_loop_config_path"):
        no_yaml = "actor_rollout_ref.rollout.agent.agent_loop_config_path=null"
        bridge_main.check_config(example_config(no_yaml))


def test_agent_loop_yaml_and_task_runner():
    (entry,) = OmegaConf.load(bridge_main.AGENT_LOOP_YAML)
    assert entry.name == "bipace_env" and get_class(entry._target_) is BipaceEnvAgentLoop
    from verl.trainer.main_ppo import TaskRunnerV1
    assert issubclass(bridge_main.BipaceTaskRunner.__ray_actor_class__, TaskRunnerV1.__ray_actor_class__)


def test_dataset_rows_name_env_task_and_seed(tmp_path, capsys):
    dataset_main(["--env", "textcraft", "--out", str(tmp_path), "--env-kwargs", '{"depths": [1, 2]}',
                  "--train-size", "3", "--val-size", "2"])
    train, val = pd.read_parquet(tmp_path / "train.parquet"), pd.read_parquet(tmp_path / "val.parquet")
    assert len(train) == 3 and len(val) == 2 and "train: 3 textcraft tasks" in capsys.readouterr().out
    task = task_of({"extra_info": dict(train.iloc[1]["extra_info"])})
    assert task["env"] == "textcraft" and task["env_kwargs"] == {"depths": [1, 2]} and task["seed"] == 1
    assert task["task_id"] != task_of({"extra_info": dict(train.iloc[0]["extra_info"])})["task_id"]
    assert list(train.iloc[0]["prompt"])[0]["role"] == "user"
    with pytest.raises(SystemExit, match="JSON object"):
        dataset_main(["--env", "textcraft", "--out", str(tmp_path), "--env-kwargs", "{depths"])
