"""benchmarks/speed/policy_speed.py: variant names, and a tiny side-by-side run that prints every figure."""
import argparse

import pytest

from benchmarks.speed import policy_speed


def test_variant_names_combine_a_base_with_cheaper_update_modifiers():
    assert policy_speed.variant_settings("compact+shared,kl0,top12") == dict(
        compact_prompts="yes", share_prefix=True, kl_coef=0.0, lora_layers=12)
    assert policy_speed.variant_settings("verbose") == dict(compact_prompts="no", share_prefix=False)
    assert policy_speed.variant_settings("compact+shared,rows,nocarry") == dict(
        compact_prompts="yes", share_prefix=True, minibatch_unit="row", carry_cache=False)
    for bad, why in (("shared,top8", "the base must be one of"), ("compact,top0", "unknown modifier 'top0'"),
                     ("compact,fast", "unknown modifier 'fast'")):
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            policy_speed.variant_settings(bad)


def test_tiny_run_times_each_variant_and_reports_how_far_its_update_moved_the_policy(tmp_path, capsys):
    import torch
    threads = torch.get_num_threads()
    try:
        policy_speed.main(["--models", "tiny", "--variants", "compact+shared", "compact+shared,top1",
                           "--repeats", "1", "--preset", "smoke", "--set", "batch_tasks=1", "--set",
                           "group_size=2", "--set", "max_new_tokens=4", "--set", "lr=1e-2",
                           "--drift-rows", "4", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    rows = {line.split("|")[2].strip(): line.split("|") for line in out.splitlines()
            if line.startswith("| tiny |")}
    assert set(rows) == {"compact+shared", "compact+shared,top1"}
    drifts = {v: float(r[-2]) for v, r in rows.items()}
    assert all(d > 0 for d in drifts.values())      # each update moved its policy (lr 1e-2)
    assert "tiny: compact+shared,top1 vs compact+shared: rollout" in out
