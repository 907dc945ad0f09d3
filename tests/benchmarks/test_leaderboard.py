"""The credit leaderboard: run folders side by side, rank agreement, the doc block it fills."""
import csv
import math

import pytest

from benchmarks.credit import leaderboard


def write_run(folder, scores: dict, pairs: dict):
    """scores: estimator -> Pearson r; pairs: pair -> (diff, lo, hi, beyond)."""
    folder.mkdir(parents=True)
    with open(folder / "scores.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["normalisation", "estimator", "metric", "value", "lo", "hi"])
        for name, r in scores.items():
            w.writerow(["own", name, "pearson", 0.0, 0.0, 0.0])   # other normalisation: must be ignored
            w.writerow(["common", name, "pearson", r, r - 0.05, r + 0.05])
            w.writerow(["common", name, "expert_spearman", "", "", ""])
    with open(folder / "pairs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["normalisation", "pair", "metric", "diff", "lo", "hi", "beyond_interval", "better"])
        for pair, (d, lo, hi, beyond) in pairs.items():
            w.writerow(["common", pair, "pearson", d, lo, hi, beyond, ""])
    return folder


def test_tables_columns_order_bold_and_rank_agreement(tmp_path):
    a = write_run(tmp_path / "env-a", {"gigpo": 0.3, "pace": 0.5, "grpo": 0.1},
                  {"pace - gigpo": (0.2, 0.1, 0.3, True), "grpo - gigpo": (-0.2, -0.5, 0.1, False)})
    b = write_run(tmp_path / "b", {"gigpo": 0.2, "pace": 0.4, "grpo": 0.0, "hcapo": 0.9},
                  {"pace - gigpo": (0.2, -0.1, 0.5, False)})
    text = leaderboard.main([str(a), f"policy-b={b}"])
    lines = text.splitlines()
    assert "| estimator | env-a (rel. n/a) | policy-b (rel. n/a) |" in lines
    rows = [ln.split(" |")[0].strip("| ") for ln in lines if ln.startswith("| ") and "[" in ln]
    # scored everywhere first, by mean Pearson r; hcapo (one column only) after them
    assert rows[:4] == ["pace", "gigpo", "grpo", "hcapo"]
    assert "| pace - gigpo | **+0.200 [+0.100, +0.300]** | +0.200 [-0.100, +0.500] |" in lines
    assert "| grpo - gigpo | -0.200 [-0.500, +0.100] | n/a |" in lines
    assert "| hcapo | n/a | 0.900 [0.850, 0.950] |" in lines
    assert "- env-a vs policy-b: Kendall tau +1.00 over 3 estimators" in lines
    assert "ρ with expert A" not in text          # no column scored it: no table


def test_rank_agreement_reversed(tmp_path):
    a = write_run(tmp_path / "a", {"x": 0.1, "y": 0.2, "z": 0.3}, {})
    b = write_run(tmp_path / "b", {"x": 0.3, "y": 0.2, "z": 0.1}, {})
    lines = leaderboard.rank_agreement([leaderboard.read_column(str(a)), leaderboard.read_column(str(b))])
    assert lines == ["- a vs b: Kendall tau -1.00 over 3 estimators"]


def test_doc_block_is_filled_and_missing_markers_refused(tmp_path):
    run = write_run(tmp_path / "run", {"gigpo": 0.3, "pace": 0.5}, {})
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{leaderboard.START}\nSTALE\n{leaderboard.END}\nafter\n")
    leaderboard.main([str(run), "--doc", str(doc)])
    body = doc.read_text()
    assert body.startswith("intro\n") and body.endswith("after\n") and "STALE" not in body
    assert "| pace | 0.500 [0.450, 0.550] |" in body
    bare = tmp_path / "bare.md"
    bare.write_text("nothing here\n")
    with pytest.raises(SystemExit):
        leaderboard.main([str(run), "--doc", str(bare)])
    with pytest.raises(ValueError, match="leaderboard:start"):
        leaderboard.update_doc(bare, "x")


def test_folder_without_report_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        leaderboard.main([str(tmp_path / "nope")])
    assert "nope: no scores.csv or pairs.csv" in capsys.readouterr().err


@pytest.mark.parametrize("a, b, tau", [
    ([1, 2, 3], [1, 3, 2], 1 / 3),                          # 2 concordant pairs, 1 discordant
    ([1, 1, 2], [1, 2, 3], 2 / 6 ** 0.5),                   # one tie in a: tau-b's correction
    ([3, 2, 1, 0], [0, 1, 2, 3], -1.0),
    ([0.2, 0.5, 0.5, 0.1], [1.0, 2.0, 2.0, 0.0], 1.0),      # ties in both, at the same pair
])
def test_kendall_tau_b_by_hand(a, b, tau):
    from benchmarks.stats import kendall_tau_b
    assert kendall_tau_b(a, b) == pytest.approx(tau)
    assert kendall_tau_b(b, a) == pytest.approx(tau)


def test_kendall_tau_b_undefined():
    from benchmarks.stats import kendall_tau_b
    assert math.isnan(kendall_tau_b([1, 2], [2, 1])) and math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="equally long"):
        kendall_tau_b([1, 2, 3], [1, 2])


def test_reliability_heads_each_column_and_a_low_one_does_not_rank(tmp_path):
    import json
    a = write_run(tmp_path / "a", {"gigpo": 0.3, "pace": 0.5}, {})
    b = write_run(tmp_path / "b", {"gigpo": 0.9, "pace": 0.1}, {})
    (a / "reliability.json").write_text(json.dumps({"unbiased": 0.71, "split_half": 0.69}))
    (b / "reliability.json").write_text(json.dumps({"unbiased": 0.12, "split_half": 0.2}))
    lines = leaderboard.main([str(a), str(b)]).splitlines()
    assert "| estimator | a (rel. 0.71) | b (rel. 0.12, LOW: not ranked) |" in lines
    rows = [ln.split(" |")[0].strip("| ") for ln in lines if ln.startswith("| ") and "[" in ln]
    assert rows[:2] == ["pace", "gigpo"]          # ordered by a alone: b's truth is mostly noise


def test_a_pool_whose_batches_disagree_in_sign_is_marked(tmp_path):
    import json
    scores = {"gigpo": 0.3, "bigpo": 0.2}
    one = write_run(tmp_path / "one", scores, {"bigpo - gigpo": (-0.02, -0.03, -0.01, True),
                                               "pace - gigpo": (0.02, 0.01, 0.03, True)})
    two = write_run(tmp_path / "two", scores, {"bigpo - gigpo": (0.02, 0.01, 0.03, True),
                                               "pace - gigpo": (0.01, -0.01, 0.03, False)})
    pooled = write_run(tmp_path / "pooled", scores, {"bigpo - gigpo": (0.0, -0.01, 0.01, False),
                                                     "pace - gigpo": (0.015, 0.005, 0.025, True)})
    (pooled / "parts.json").write_text(json.dumps([str(one), str(two)]))
    lines = leaderboard.main([str(pooled)]).splitlines()
    assert "| bigpo - gigpo | +0.000 [-0.010, +0.010] ‡ |" in lines
    assert "| pace - gigpo | **+0.015 [+0.005, +0.025]** |" in lines     # one batch short of 0: no conflict
    assert any(ln.startswith("‡: the pooled batches") for ln in lines)
    assert "pooled (rel. n/a, 2 batches pooled)" in "\n".join(lines)
    (pooled / "parts.json").write_text(json.dumps([str(one), str(tmp_path / "gone")]))
    with pytest.raises(SystemExit):
        leaderboard.main([str(pooled)])


def test_disattenuated_table_divides_by_the_root_of_each_columns_reliability(tmp_path):
    a = write_run(tmp_path / "a", {"gigpo": 0.3, "pace": 0.4}, {"pace - gigpo": (0.1, 0.05, 0.15, True)})
    (a / "reliability.json").write_text('{"unbiased": 0.25, "split_half": 0.3}')
    b = write_run(tmp_path / "b", {"gigpo": 0.3, "pace": 0.4}, {})
    text = leaderboard.main([str(a), str(b)])
    block = text.split("Pearson r disattenuated")[1].split("paired difference")[0]
    assert "| pace | 0.800 [0.700, 0.900] | n/a |" in block        # 0.4 / sqrt(0.25); b has no reliability
    assert "| gigpo | 0.600 [0.500, 0.700] | n/a |" in block
