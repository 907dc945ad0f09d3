"""Does an estimator help a policy learn? Training runs per estimator and seed, scored on held-out tasks.

    bipace-compare                                                    # estimators compared on TextCraft
    python -m benchmarks.learning.train_table --out runs/table        # TextCraft: zero-shot, warm start, RL
    python -m benchmarks.learning.env_table --preset alfworld-table --out runs/alfworld_table

``compare`` (the ``bipace-compare`` command) runs the credit-accuracy stage and then short training runs
with curves. ``train_table`` and ``env_table`` build resumable held-out tables (reports:
``table_report``, ``env_table_report``; settings: ``table_settings``). ``goal_probe``, ``second_eval``
and ``episode_diff`` look inside a table: where a policy wins, whether a result replicates on other
episodes, which episodes a change of policy won or lost.
"""
