"""The credit benchmark's scores: the same-state impurity test, the within-goal correlation, one common
normalisation, BiPACE's ingredients as paired differences, pooling batches, and a non-finite estimator
named; then the run folder's manifest and the policy's random streams and prompt check."""
import numpy as np
import pytest

from benchmarks.credit.advantage_report import DECOMPOSITION, impure_rows, score, verdict
from benchmarks.credit.score_inputs import Estimate, NonFiniteAdvantages, ScoreInputs, estimator_advantages


def test_a_group_of_one_state_value_is_flagged_about_five_percent_of_the_time_whatever_its_size():
    """Under the same-state null, states whose MC values differ only by their noise are flagged at the
    test's 5% level, for groups of 2 and of 30 states alike; the old any-pair-beyond-2-SE rule flagged
    nearly every big group. States of different value are flagged."""
    rng = np.random.default_rng(0)
    for size in (2, 30):
        groups = 400
        codes = np.repeat(np.arange(groups), size)
        start = np.arange(groups * size)
        se = rng.uniform(0.5, 2.0, len(start))
        v = 3.0 + rng.normal(0, se)
        rate = impure_rows(codes, start, v, se).reshape(groups, size)[:, 0].mean()
        assert 0.02 < rate < 0.09, (size, rate)
        pair_any = np.abs(v[:, None] - v[None, :])   # the old rule, on one big group: almost surely flagged
        if size == 30:
            block = slice(0, size)
            tol = 2 * np.sqrt(se[block][:, None] ** 2 + se[block][None, :] ** 2)
            assert np.any(pair_any[block, block] > tol)
    codes, start = np.zeros(4, int), np.arange(4)
    assert impure_rows(codes, start, np.array([0.0, 0.1, 8.0, 8.1]), np.full(4, 0.5)).all()
    # rows of one state are one state: never impure however many
    assert not impure_rows(np.zeros(5, int), np.zeros(5, int), np.zeros(5), np.ones(5)).any()


def _inputs(adv, est_by_name, goals, codes=None):
    n = len(adv)
    ests = {k: Estimate(np.asarray(v, float), None if codes is None else codes.get(k))
            for k, v in est_by_name.items()}
    return ScoreInputs(np.asarray(goals).astype(str), np.asarray(adv, float), np.full(n, 0.1), np.arange(n),
                       np.zeros(n), np.full(n, 0.1), None, {"own": ests, "common": ests})


def test_within_goal_correlation_ignores_goal_offsets_that_pooled_correlation_pays_for():
    rng = np.random.default_rng(1)
    goals = np.repeat(np.arange(8), 12)
    adv = rng.normal(0, 1, len(goals))
    offset = rng.normal(0, 3, 8)[goals]
    s = score(_inputs(adv, {"gigpo": adv + offset, "pace": adv}, goals), "own", pairs=[("pace", "gigpo")])
    pearson, within = 0, 1
    assert s.point["gigpo"][within] == pytest.approx(1.0) and s.point["gigpo"][pearson] < 0.6
    assert s.point["pace"][pearson] == pytest.approx(1.0)
    pair = next(r for r in s.pairs if r["pair"] == "pace - gigpo" and r["metric"] == "pearson")
    assert pair["beyond_interval"] and pair["better"] == "pace" and pair["lo"] > 0
    assert s.n_goals == 8 and np.all(s.lo["gigpo"][:2] <= s.point["gigpo"][:2])


def test_paired_differences_take_biPACEs_ingredients_apart_then_everyone_against_gigpo():
    rng = np.random.default_rng(2)
    goals = np.repeat(np.arange(6), 10)
    adv = rng.normal(0, 1, len(goals))
    names = ["gigpo", "pace", "bigpo", "bipace", "grpo", "ecpo"]
    s = score(_inputs(adv, {n: adv + rng.normal(0, 1 + k, len(adv)) for k, n in enumerate(names)}, goals),
              "common")
    pairs = list(dict.fromkeys(r["pair"] for r in s.pairs))
    assert pairs[:4] == [f"{a} - {b}" for a, b in DECOMPOSITION if a in names and b in names]
    assert {"grpo - gigpo", "ecpo - gigpo"} <= set(pairs)
    lines = verdict(s)
    assert len(lines) == 4 and all(("not separated at this size" in x) or ("closer to A" in x) for x in lines)


def test_pooling_keeps_each_batchs_goals_and_states_apart(tmp_path):
    adv = np.arange(6.0)
    a = _inputs(adv, {"gigpo": adv}, [0, 0, 0, 1, 1, 1], codes={"gigpo": np.array([0, 0, 1, 2, 2, 3])})
    b = _inputs(adv, {"gigpo": adv}, [0, 0, 0, 1, 1, 1], codes={"gigpo": np.array([0, 0, 1, 2, 2, 3])})
    pooled = ScoreInputs.pool([a, b], ["A", "B"])
    assert len(set(pooled.goal)) == 4 and len(set(pooled.start)) == 12
    assert len(set(pooled.estimates["own"]["gigpo"].codes)) == 8
    assert score(pooled, "own").n_goals == 4
    a.estimates["common"]["bipace"] = Estimate(None, reason="needs embedding")
    a.save(tmp_path / "a.npz", won=0.25)
    back, meta = ScoreInputs.load(tmp_path / "a.npz")
    assert meta == {"won": 0.25} and back.estimates["common"]["bipace"].reason == "needs embedding"
    assert np.array_equal(back.estimates["own"]["gigpo"].codes, a.estimates["own"]["gigpo"].codes)
    assert np.array_equal(back.goal, a.goal) and np.array_equal(back.adv, a.adv)


def test_every_estimator_at_one_normalisation_and_a_nonfinite_one_named(monkeypatch):
    from estimators import REGISTRY, StepBatch
    from estimators.registry import register
    batch = StepBatch(group_id=np.repeat([0, 1], 4), traj_id=np.arange(8), step_idx=np.zeros(8, int),
                      reward=np.array([10, 0, 10, 0, 10, 10, 0, 0], float), action_valid=np.ones(8, bool),
                      anchor=np.array(["s"] * 8, dtype=object), action_key=np.array(["a"] * 8, dtype=object))
    own = estimator_advantages(batch, {}, ["grpo"])["grpo"].adv
    common = estimator_advantages(batch, {}, ["grpo"], mode="mean_norm")["grpo"].adv
    assert not np.allclose(own, common) and np.allclose(common[:4], [5, -5, 5, -5])
    monkeypatch.setitem(REGISTRY, "broken", REGISTRY["grpo"])
    register("broken")(lambda b, o: np.full(len(b.reward), np.nan))
    with pytest.raises(NonFiniteAdvantages, match="'broken'.*first rows \\[0, 1, 2, 3, 4\\]"):
        estimator_advantages(batch, {}, ["broken"])


def test_the_truths_k_may_grow_on_a_rerun_and_the_manifest_keeps_its_history(tmp_path):
    import json

    from benchmarks.credit.manifest import ManifestMismatch, check_manifest
    out = tmp_path / "aa"
    check_manifest(out, {"samples": 12, "seed": 0}, ["batch.pkl"], may_grow=("samples",))
    check_manifest(out, {"samples": 14, "seed": 0}, ["batch.pkl"], may_grow=("samples",))
    kept = json.loads((out / "manifest.json").read_text())
    assert kept["samples"] == 14 and kept["grown"] == {"samples": [12, 14]}
    check_manifest(out, {"samples": 14, "seed": 0}, ["batch.pkl"], may_grow=("samples",))   # continues
    with pytest.raises(ManifestMismatch, match="samples: 14 there, 8 now"):             # K never shrinks
        check_manifest(out, {"samples": 8, "seed": 0}, ["batch.pkl"], may_grow=("samples",))
    with pytest.raises(ManifestMismatch, match="seed: 0 there, 1 now"):       # nor grows beside others
        check_manifest(out, {"samples": 16, "seed": 1}, ["batch.pkl"], may_grow=("samples",))
    with pytest.raises(ManifestMismatch, match="samples: 14 there, 16 now"):            # only where allowed
        check_manifest(out, {"samples": 16, "seed": 0}, ["batch.pkl"])
    assert json.loads((out / "manifest.json").read_text()) == kept


def test_a_rerun_with_other_settings_names_what_differs(tmp_path):
    from benchmarks.credit.manifest import ManifestMismatch, check_manifest, fingerprint
    out = tmp_path / "aa"
    check_manifest(out, {"tasks": 12, "seed": 0, "set": ["a=1"]}, ["batch.pkl"])
    (out / "batch.pkl").write_text("x")
    check_manifest(out, {"tasks": 12, "seed": 0, "set": ("a=1",)}, ["batch.pkl"])     # same: continues
    with pytest.raises(ManifestMismatch, match="seed: 0 there, 1 now; tasks: 12 there, 8 now"):
        check_manifest(out, {"tasks": 8, "seed": 1, "set": ["a=1"]}, ["batch.pkl"])
    old = tmp_path / "old"
    old.mkdir()
    (old / "batch.pkl").write_text("x")
    with pytest.raises(ManifestMismatch, match="no manifest.json"):
        check_manifest(old, {"tasks": 12}, ["batch.pkl"])
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "model.safetensors").write_bytes(b"1")
    first = fingerprint(str(policy))
    (policy / "model.safetensors").write_bytes(b"2")
    assert fingerprint(str(policy)) != first and fingerprint("smollm2-135m") == "smollm2-135m"


def test_the_batch_and_the_continuations_draw_from_different_streams():
    import torch
    from benchmarks.credit.policy_play import stream_seed
    seeds = {stream_seed(0, "batch"), stream_seed(0, "continuations", 0), stream_seed(0, "continuations", 1),
             stream_seed(1, "batch")}
    assert len(seeds) == 4
    draws = []
    for s in (stream_seed(0, "batch"), stream_seed(0, "continuations", 0)):
        torch.manual_seed(s)
        draws.append(torch.rand(4))
    assert not torch.equal(*draws)


def test_a_continuation_whose_first_prompt_differs_stops_the_run():
    import torch
    from agents.replay import Replay
    from benchmarks.credit.policy_play import PolicyPlay, PromptMismatch
    play = PolicyPlay.__new__(PolicyPlay)
    play.checked = 0
    play.expected = {("stick", 5, ("get 1 oak log",)): torch.tensor([1, 2, 3])}
    job = ("stick", 5, Replay(("get 1 oak log",), ("h0", "h1")), 1)
    play._check_first_prompt(job, torch.tensor([1, 2, 3]))
    assert play.checked == 1
    with pytest.raises(PromptMismatch, match="step 1 of goal stick"):
        play._check_first_prompt(job, torch.tensor([1, 2, 4]))
    with pytest.raises(PromptMismatch, match="none recorded"):
        play._check_first_prompt(("plank", 5, Replay((), ("h0",)), 0), torch.tensor([1]))


def test_pool_scores_finished_batches_as_one_from_the_command_line(tmp_path):
    from benchmarks.credit import advantage_accuracy as aa
    rng = np.random.default_rng(3)
    runs = []
    for name in ("a", "b"):
        goals = np.repeat(np.arange(5), 6)
        adv = rng.normal(0, 1, len(goals))
        inputs = _inputs(adv, {"gigpo": adv + rng.normal(0, 1, len(adv)), "pace": adv}, goals)
        (tmp_path / name).mkdir()
        inputs.save(tmp_path / name / "score_inputs.npz", won=0.5)
        runs.append(str(tmp_path / name))
    assert aa.main(["--pool", *runs, "--out", str(tmp_path / "pooled")]) == 0
    summary = (tmp_path / "pooled" / "summary.md").read_text()
    assert "2 batches pooled" in summary and "10 goals" in summary and "pace - gigpo" in summary
    missing = ["--pool", str(tmp_path / "a"), str(tmp_path / "nothing"), "--out", str(tmp_path / "p2")]
    assert aa.main(missing) == 2


def test_rescore_rewrites_a_finished_run_s_report_under_its_header(tmp_path):
    import csv

    from benchmarks.credit import advantage_accuracy as aa
    rng = np.random.default_rng(4)
    goals = np.repeat(np.arange(6), 5)
    adv = rng.normal(0, 1, len(goals))
    run = tmp_path / "run"
    run.mkdir()
    inputs = _inputs(adv, {"gigpo": adv + rng.normal(0, 1, len(adv)), "pace": adv}, goals)
    inputs.save(run / "score_inputs.npz")
    (run / "summary.md").write_text("The batch's own header.\n\nold tables\n")
    (run / "rows.csv").write_text("kept\n")
    assert aa.main(["--rescore", "--out", str(run)]) == 0
    summary = (run / "summary.md").read_text()
    assert summary.startswith("The batch's own header.\n\n") and "old tables" not in summary
    assert "pace - gigpo" in summary and (run / "rows.csv").read_text() == "kept\n"
    with open(run / "scores.csv") as f:
        assert {r["estimator"] for r in csv.DictReader(f)} == {"gigpo", "pace"}
    assert aa.main(["--rescore", "--out", str(tmp_path / "nothing")]) == 2
    assert aa.main(["--rescore", "--overwrite", "--out", str(run)]) == 2


def test_a_batch_folder_has_one_writer_and_continues_only_with_resume(tmp_path, capsys):
    """The tiny model never wins, so each call stops after the ground truth; what it kept is reused by
    --resume (nothing replayed), refused without it, and refused under other settings."""
    from benchmarks.credit import advantage_accuracy as aa
    out = tmp_path / "aa"
    argv = ["--out", str(out), "--policy", "tiny", "--preset", "smoke", "--tasks", "2", "--group-size", "2",
            "--samples", "2", "--screen-repeats", "0", "--no-progress"]
    with pytest.raises(SystemExit, match="every MC advantage is zero"):
        aa.main(argv)
    assert "every continuation's first prompt was the recorded one (12 checked)" in capsys.readouterr().out
    assert aa.main(argv) == 2 and "is not empty" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="every MC advantage is zero"):
        aa.main(argv + ["--resume"])
    assert "0 continuations to play" in capsys.readouterr().out
    assert aa.main([*argv, "--resume", "--seed", "1"]) == 2
    assert "seed: 0 there, 1 now" in capsys.readouterr().err


def noisy_inputs(rng, n_goals, noise_sd, rows=20):
    """A noise-free A plus independent noise of known variance; halves with twice the noise each."""
    goals = np.repeat(np.arange(n_goals), rows)
    true = rng.normal(0, 1, len(goals))
    halves = true + rng.normal(0, noise_sd * np.sqrt(2), (2, len(goals)))
    adv = halves.mean(axis=0)
    inputs = _inputs(adv, {"gigpo": true + rng.normal(0, 0.5, len(goals)), "pace": true}, goals)
    inputs.noise_var, inputs.halves = np.full(len(goals), noise_sd ** 2), halves
    return inputs


def test_reliability_two_ways_and_pooled_and_kept_in_the_npz(tmp_path):
    rng = np.random.default_rng(5)
    a, b = noisy_inputs(rng, 30, 1.0), noisy_inputs(rng, 30, 1.0)       # reliability 1 / (1 + 1) = 0.5
    for inputs in (a, ScoreInputs.pool([a, b], ["a", "b"])):
        unbiased, split = inputs.reliability()
        assert abs(unbiased - 0.5) < 0.08 and abs(split - 0.5) < 0.08
    a.save(tmp_path / "x.npz")
    back, _ = ScoreInputs.load(tmp_path / "x.npz")
    assert back.reliability() == a.reliability()
    old = _inputs(a.adv, {"pace": a.adv}, a.goal)                        # a run from before: not recorded
    assert all(np.isnan(old.reliability()))


def test_a_low_reliability_says_so_and_disattenuates(tmp_path):
    from benchmarks.credit.advantage_report import LOW_RELIABILITY, METRICS, markdown, score
    rng = np.random.default_rng(6)
    noisy = noisy_inputs(rng, 20, 2.0)                                  # reliability 0.2
    assert noisy.reliability()[0] < LOW_RELIABILITY
    common = score(noisy, "common")
    text = markdown(score(noisy, "own"), common, "header")
    assert "**Low reliability" in text and "do not rank the estimators" in text
    i = METRICS.index("pearson")
    r = common.point["pace"][i]
    assert f"| pace | {r:.3f} | {r / np.sqrt(noisy.reliability()[0]):.3f} |" in text
    clean = noisy_inputs(rng, 20, 0.3)
    assert "Low reliability" not in markdown(score(clean, "own"), score(clean, "common"), "header")
