"""benchmarks/speed/carried_cache.py: the expert's episodes replayed through every cache variant give the same
answers, and the compacted cache is the narrowest carried one."""
from benchmarks.speed import carried_cache


def test_tiny_replay_prints_each_variant_with_the_same_answers_and_a_narrower_compacted_cache(capsys):
    import torch
    threads = torch.get_num_threads()
    try:
        # depth 3-4 goals: episodes of several steps, so caches are carried more than once
        carried_cache.main(["--preset", "smoke", "--episodes", "3", "--repeats", "1", "--set", "max_steps=8",
                            "--set", "history_length=8", "--set",
                            'env_kwargs={"preset": "agentgym", "depths": [3, 4]}'])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in carried_cache.VARIANTS}
    assert set(rows) == set(carried_cache.VARIANTS)
    assert len({r[-1] for r in rows.values()}) == 1                 # answer tokens: same greedy answers
    width = {v: float(r[3]) for v, r in rows.items()}
    assert width["afresh"] == 0 and 0 < width["compact"] < width["masked"]
