"""Benchmarks: scripts that answer questions about the library with figures, grouped by question.

    benchmarks.credit    which estimator assigns credit best (against Monte-Carlo or exact advantages)
    benchmarks.learning  does an estimator help a policy learn (comparisons, learning tables, probes)
    benchmarks.speed     what envs, estimators, rollouts, updates and GPUs cost

Every script runs as ``python -m benchmarks.<question>.<script> --help``; ``benchmarks/README.md`` is the
index (question, script, command, typical time). Shared here: ``stats`` (95% intervals), ``plotting``
(the reports' axes and styles) and ``warm_start`` (the SFT warm start the tables and the credit benchmark
start from). A subpackage imports these and the library, and ``learning`` may run ``credit``'s accuracy
stage; nothing imports back up from the library or across the other way.
"""
