"""Entry point: verl's ``main_ppo`` with the bipace trainer and agent loop known to its Ray processes.

    python -m agents.verl_bridge.main --config-path $PWD/examples/verl --config-name alfworld_qwen1.5b \\
        trainer.n_gpus_per_node=8

Same Hydra config as ``python -m verl.trainer.main_ppo`` (verl's ``ppo_trainer.yaml`` and every
override). The one difference is the Ray task runner: ``BipaceTaskRunner`` is verl's V1 runner defined
in this module, so the process Ray starts for it imports this package, which registers the
``bipace_sync`` trainer there (``trainer.v1.trainer_mode=bipace_sync``). Rollout workers find the
``bipace_env`` agent loop through ``AGENT_LOOP_YAML``. Only verl's V1 trainer (``trainer.use_v1=true``,
its default) is supported: its agent-loop worker keeps one sample per step.
"""
from __future__ import annotations

import os

import hydra
import ray
import verl.trainer
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

from agents.verl_bridge import agent_loop, trainer  # noqa: F401  (register bipace_env and bipace_sync)
from estimators import REGISTRY

VERL_CONFIG_DIR = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
AGENT_LOOP_YAML = os.path.join(os.path.dirname(__file__), "config", "agent_loop.yaml")


@ray.remote
class BipaceTaskRunner(TaskRunnerV1.__ray_actor_class__):
    """verl's V1 task runner, unchanged; lives here so that its process imports our registrations."""


def check_config(config) -> None:
    """The settings the bridge depends on, each refused with what to set instead."""
    if not config.trainer.get("use_v1", True):
        raise ValueError("the bipace bridge needs verl's V1 trainer (trainer.use_v1=true): the legacy "
                         "trainer keeps one sample per agent-loop run, ours returns one per step")
    name = config.algorithm.adv_estimator
    mode = config.trainer.v1.trainer_mode
    if name in REGISTRY and name not in ("grpo", "rloo") and mode != "bipace_sync":
        raise ValueError(f"algorithm.adv_estimator={name} is a bipace estimator: set "
                         f"trainer.v1.trainer_mode=bipace_sync (got {mode!r})")
    if name in REGISTRY and mode == "bipace_sync":
        trainer.check_algorithm(config.algorithm)     # now, not after the first rollout
    path = config.actor_rollout_ref.rollout.agent.get("agent_loop_config_path")
    if config.actor_rollout_ref.rollout.agent.get("default_agent_loop") == "bipace_env" and not path:
        raise ValueError("the bipace_env agent loop needs actor_rollout_ref.rollout.agent."
                         f"agent_loop_config_path={AGENT_LOOP_YAML} so verl's rollout workers can build it")


@hydra.main(config_path=VERL_CONFIG_DIR, config_name="ppo_trainer", version_base=None)
def main(config):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device
    auto_set_device(config)
    check_config(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    run_ppo(config, task_runner_class=BipaceTaskRunner)


if __name__ == "__main__":
    main()
