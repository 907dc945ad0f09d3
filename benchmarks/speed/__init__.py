"""What does it cost? Envs against their reference engines, estimators against per-row loops, rollouts,
updates, warm-start steps and GPU memory, each measured side by side in one run.

    python -m benchmarks.speed.env_speed textcraft                   # or webshop, alfworld
    python -m benchmarks.speed.estimator_speed                       # library vs reference_loops
    python -m benchmarks.speed.policy_speed                          # tokens/s of rollouts and updates
    bash benchmarks/speed/gpu_check.sh .whl                          # one prepared command on a GPU

The rest (``vector_speed``, ``carried_cache``, ``sft_cost``, ``rollout_overhead``, ``rollout_vs_generate``,
``hindsight_cost``, ``update_memory``, ``alfworld_expert_sweep``) each answer one question of the index
in ``benchmarks/README.md``. ``reference_loops`` holds the per-row Python loops the estimators are timed
and tested against; ``random_qwen`` builds random-weight Qwen2.5 shapes for GPUs without a model hub.
"""
