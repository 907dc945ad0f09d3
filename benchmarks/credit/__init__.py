"""Which estimator assigns credit best? Each estimator's advantages scored against the true advantage.

    python -m benchmarks.credit.advantage_accuracy --out runs/aa_tc_2plus --ingredients 2+   # real policy
    python -m benchmarks.credit.estimator_quality --out runs/estimator_quality               # exact Q - V
    python -m benchmarks.credit.eps_calibration --set model=runs/table/warm_start            # BiGPO's radius

``advantage_accuracy`` plays a real policy's rollouts and compares every estimator's advantage with the
Monte-Carlo advantage of that policy on the same rows (truth: ``mc_truth``; scores and report:
``advantage_metrics``, ``advantage_report``; what they read: ``score_inputs``). ``estimator_quality`` does
the same on small text MDPs (``text_mdp``) whose advantages dynamic programming gives exactly;
``group_stats`` measures the step groups an estimator forms; ``eps_calibration`` picks the hidden-state
radius those groups depend on.
"""
