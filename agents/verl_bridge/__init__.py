"""Train with verl 0.9.1: bipace envs and estimators inside verl's (V1, TransferQueue) PPO trainer.

    pip install -e ".[verl]"
    python -m agents.verl_bridge.dataset --env alfworld --out data/alfworld   # train/val parquet of tasks
    python -m agents.verl_bridge.main <hydra overrides>                       # see examples/verl/

Modules: ``steps`` (the per-step fields each sample carries, StepBatch <-> DataProto, token-level
advantages), ``agent_loop`` (``bipace_env``: plays one env episode through verl's LLM server, one sample
per step), ``hidden`` (BiGPO hidden state tapped in a forward), ``worker`` (verl's actor worker that
records it in the old-log-prob forward as ``bipace_embedding``), ``trainer`` (verl's sync trainer with
our estimators in its advantage step and, for BiGPO/BiPACE, that worker), ``validation`` (the launch
checks, verl's ``validate_config`` included, run before Ray starts), ``main`` (the entry point),
``dataset``, ``cpu_backend`` (a CPU platform and a transformers rollout for tests; docs/verl.md).

Only this subpackage needs verl; ``import agents`` and ``import estimators`` never import it.
"""
try:
    import verl  # noqa: F401
except ImportError as exc:    # say what to install instead of a bare ModuleNotFoundError deep inside
    raise ImportError("agents.verl_bridge needs verl 0.9.1 and its pinned transformers; install them with "
                      "`pip install -e \".[verl]\"` (in a separate environment if you keep another "
                      f"transformers version elsewhere). Original error: {exc}") from exc
