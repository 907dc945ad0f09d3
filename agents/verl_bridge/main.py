"""Entry point: verl's ``main_ppo`` with the bipace trainer and agent loop known to its Ray processes.

    python -m agents.verl_bridge.main --config-path $PWD/examples/verl --config-name alfworld_qwen1.5b \\
        trainer.n_gpus_per_node=8
    BIPACE_VERL_CHECK_ONLY=1 python -m agents.verl_bridge.main ...   # validate the config, start nothing

Same Hydra config as ``python -m verl.trainer.main_ppo`` (verl's ``ppo_trainer.yaml`` and every
override), validated the same way (verl's ``validate_config``) plus our checks, before Ray starts; a
rejected config names the line of the config file (or the override) that sets the keys verl's message
names. The one difference is the Ray task runner: ``BipaceTaskRunner`` is verl's V1 runner whose
``run`` first imports our trainer in the runner's own process (Ray pickles the class by value, so
nothing imported in the driver exists there) and makes verl's ``sync`` mode build ``BipacePPOTrainer``
there. Rollout workers find the ``bipace_env`` agent loop through ``AGENT_LOOP_YAML``. Only verl's V1
trainer (``trainer.use_v1=true``, its default) in ``sync`` mode is supported: its agent-loop worker
keeps one sample per step.
"""
from __future__ import annotations

import os

import hydra
import ray
import verl.trainer
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

from agents.verl_bridge import agent_loop, trainer  # noqa: F401  (register bipace_env and our estimators)
from agents.verl_bridge.validation import (AGENT_LOOP_YAML, ConfigRejected, check_config,  # noqa: F401
                                           validate_launch)

VERL_CONFIG_DIR = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
CHECK_ONLY_ENV = "BIPACE_VERL_CHECK_ONLY"


@ray.remote
class BipaceTaskRunner(TaskRunnerV1.__ray_actor_class__):
    """verl's V1 task runner; ``run`` trains with ``BipacePPOTrainer`` under verl's ``sync`` mode."""

    def run(self, config):
        # runs in the runner's process: the import registers our trainer, estimators and agent loop there
        from agents.verl_bridge.trainer import sync_mode_trains_with_bipace
        with sync_mode_trains_with_bipace():
            return super().run(config)

    def trainer_class(self, mode: str) -> str:
        """What verl's ``get_trainer_cls(mode)`` returns inside ``run``, in this process (module.name)."""
        from verl.trainer.ppo.v1 import get_trainer_cls

        from agents.verl_bridge.trainer import sync_mode_trains_with_bipace
        with sync_mode_trains_with_bipace():
            cls = get_trainer_cls(mode)
        return f"{cls.__module__}.{cls.__qualname__}"


def hydra_sources() -> tuple[str | None, list[str]]:
    """(the primary config file, the command-line overrides) of the running ``@hydra.main``."""
    from hydra.core.hydra_config import HydraConfig
    hc = HydraConfig.get()
    path = None
    for source in hc.runtime.config_sources:
        if source.provider == "main" and source.schema == "file":
            candidate = os.path.join(source.path, f"{hc.job.config_name}.yaml")
            path = candidate if os.path.isfile(candidate) else path
    return path, list(hc.overrides.task)


@hydra.main(config_path=VERL_CONFIG_DIR, config_name="ppo_trainer", version_base=None)
def main(config):
    from verl.utils.device import auto_set_device
    auto_set_device(config)
    config_file, overrides = hydra_sources()
    try:
        validate_launch(config, config_file, overrides)
    except ConfigRejected as exc:
        raise SystemExit(f"config rejected before starting Ray:\n{exc}") from None
    if os.environ.get(CHECK_ONLY_ENV, "") not in ("", "0"):
        print(f"config OK ({config_file or 'verl ppo_trainer'}; {len(overrides)} overrides): "
              f"{CHECK_ONLY_ENV} set, not starting Ray")
        return
    run_ppo(config, task_runner_class=BipaceTaskRunner)


if __name__ == "__main__":
    main()
