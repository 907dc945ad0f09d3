"""The trainer verl builds inside the task runner's own Ray process (a local Ray on CPU, nothing mocked).

verl's ``TaskRunnerV1.run`` calls ``get_trainer_cls(config.trainer.v1.trainer_mode)`` in the runner's
process, a Ray actor whose class Ray pickles by value: what the driver imported and registered is not
there. ``BipaceTaskRunner`` must therefore make the choice in that process, and keep verl's literal
``sync`` mode (verl's trainer base compares ``trainer_mode == "sync"`` to pick its synchronous paths)."""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra: pip install -e \".[verl]\"")
import ray  # noqa: E402  (comes with verl)
from verl.trainer.main_ppo import TaskRunnerV1  # noqa: E402
from verl.trainer.ppo.v1 import get_trainer_cls  # noqa: E402

from agents.verl_bridge.main import BipaceTaskRunner  # noqa: E402
from agents.verl_bridge.trainer import BipacePPOTrainer  # noqa: E402

OURS = f"{BipacePPOTrainer.__module__}.{BipacePPOTrainer.__qualname__}"


def in_process(actor, fn):
    """Run ``fn()`` in the actor's process (Ray's ``__ray_call__``), return its result."""
    return ray.get(actor.__ray_call__.remote(lambda self: fn()))


def _state():
    """Run in the actor (pickled by value, see below: importing this test module there would import ours)."""
    import sys
    from verl.trainer.ppo.v1 import trainer_base
    sync = trainer_base.TRAINER_REGISTRY["sync"]
    return {"pid": os.getpid(), "sync": f"{sync.__module__}.{sync.__qualname__}",
            "modes": sorted(trainer_base.TRAINER_REGISTRY),
            "bridge_trainer_imported": "agents.verl_bridge.trainer" in sys.modules}


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_the_runner_process_builds_our_trainer_for_verls_sync_mode(ray_local):
    runner = BipaceTaskRunner.remote()
    before = in_process(runner, _state)
    assert before["pid"] != os.getpid()                 # a process of its own
    # Ray pickled the runner class by value: nothing of ours imported there, verl's own 'sync' trainer
    assert before["sync"] == "verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync"
    assert not before["bridge_trainer_imported"]
    # what run() hands verl's get_trainer_cls for the config's mode
    assert ray.get(runner.trainer_class.remote("sync")) == OURS
    after = in_process(runner, _state)
    assert after["bridge_trainer_imported"] and after["sync"] == before["sync"]     # restored after use
    assert set(after["modes"]) == set(before["modes"])      # no mode name of ours: verl's literal 'sync'
    # the driver's own registry is verl's, untouched
    assert get_trainer_cls("sync") is not BipacePPOTrainer
    ray_local.kill(runner)


def test_verls_runner_alone_builds_verls_trainer(ray_local):
    """The fault this fixes: verl's runner in its own process knows only verl's trainers, whatever the
    driver registered (the driver here has imported the bridge)."""
    runner = TaskRunnerV1.remote()
    state = in_process(runner, _state)
    assert state["pid"] != os.getpid()
    assert state["sync"] == "verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync"
    assert not state["bridge_trainer_imported"]
    ray_local.kill(runner)
