"""The scripted stochastic policy of the credit benchmark: its spec and errors, its exact action
probabilities, the embedding it gives the rows, and a whole run on TextCraft with a user's estimator."""
import csv
import functools
import json
import math

import numpy as np
import pytest

import benchmarks.credit.advantage_accuracy as aa
import benchmarks.credit.aa_settings as aa_settings
from benchmarks.credit.scripted import (ExpertCannotAct, ScriptedPolicy, fill_webshop_search, parse_policy,
                                        play_episode)
from benchmarks.credit.scripted_policy import webshop_search_fill_prob

INFO = {"admissible_actions": ["go north", "go south", "take key", "go north"],
        "instruction": "i want red shoes"}


def test_a_policy_spec_is_scripted_eps_or_a_model(tmp_path):
    assert parse_policy("scripted:0.3") == ScriptedPolicy(0.3)
    assert parse_policy("scripted:1") == ScriptedPolicy(1.0)
    assert parse_policy("smollm2-135m") is None and parse_policy("Qwen/Qwen2.5-1.5B-Instruct") is None
    folder = tmp_path / "run:3"
    folder.mkdir()
    assert parse_policy(str(folder)) is None              # an existing folder whatever its name
    with pytest.raises(ValueError, match="unknown policy spec 'greedy:0.1'"):
        parse_policy("greedy:0.1")
    with pytest.raises(ValueError, match="EPS must be a number"):
        parse_policy("scripted:high")
    for eps in ("1.5", "-0.1", "nan"):
        with pytest.raises(ValueError, match=r"eps must lie in \[0, 1\]"):
            parse_policy(f"scripted:{eps}")


def _choices(policy, n=4000, best="take key", info=INFO):
    """(action, logp) of n draws."""
    rng = np.random.default_rng(0)
    expert = lambda env: [best]          # noqa: E731
    return [policy.choose(None, info, rng, "textcraft", expert, "here")[:2] for _ in range(n)]


def test_the_policy_takes_the_expert_action_with_1_minus_eps_and_says_its_exact_probability():
    assert {a for a, _ in _choices(ScriptedPolicy(0.0), 50)} == {"take key"}
    assert {lp for _, lp in _choices(ScriptedPolicy(0.0), 50)} == {0.0}
    eps, picks = 0.4, _choices(ScriptedPolicy(0.4))
    # the probabilities it reports: expert's own, a duplicated admissible command twice as likely
    want = {"take key": 1 - eps + eps / 4, "go north": 2 * eps / 4, "go south": eps / 4}
    for action, logp in picks:
        assert math.isclose(math.exp(logp), want[action])
    assert math.isclose(sum(want.values()), 1.0)
    freq = {a: np.mean([p == a for p, _ in picks]) for a in want}
    for a, p in want.items():               # 4000 draws: 4 standard errors at most
        assert abs(freq[a] - p) < 4 * math.sqrt(p * (1 - p) / len(picks))


def test_a_webshop_template_is_filled_with_instruction_words_and_keeps_its_share():
    info = {"admissible_actions": ["search[...]", "click[item a]"], "action_templates": ["search[...]"],
            "instruction": "i want red shoes under 30 dollars"}
    rng = np.random.default_rng(1)
    picks = [ScriptedPolicy(1.0).choose(None, info, rng, "webshop", lambda env: ["click[item a]"], "here")[:2]
             for _ in range(200)]
    searches = [a for a, _ in picks if a.startswith("search[")]
    assert 60 < len(searches) < 140 and len(set(searches)) > 10
    words = info["instruction"].split()
    for a in searches:
        got = a[len("search["):-1].split()
        assert 1 <= len(got) <= 5 and set(got) <= set(words)
        assert [words.index(w) for w in got] == sorted(words.index(w) for w in got)    # kept in order
    # the template's share (1/2) times the fill's own probability: k of 1..5, then one of C(7, k) word sets
    for a, lp in picks:
        if a.startswith("search["):
            assert math.isclose(math.exp(lp), 0.5 / 5 / math.comb(7, len(a[7:-1].split())))
    assert fill_webshop_search("search[...]", {}, rng) == "search[item]"


def test_the_fill_probability_is_exact_with_repeated_words():
    """Summed over every query the filler can write it is 1, and it matches the filler's frequencies; a
    repeated word makes several word sets write the same query."""
    import itertools
    info = {"instruction": "red shoes red size 8 red"}
    words = info["instruction"].split()
    queries = {"search[" + " ".join(words[i] for i in keep) + "]"
               for k in range(1, 6) for keep in itertools.combinations(range(len(words)), k)}
    probs = {q: webshop_search_fill_prob(q, info) for q in queries}
    assert math.isclose(sum(probs.values()), 1.0)
    assert math.isclose(probs["search[red]"], 3 / 6 / 5)            # k = 1 (1/5), 3 of the 6 words
    assert webshop_search_fill_prob("search[shoes  red]", info) == 0.0 == webshop_search_fill_prob(
        "search[blue]", info) == webshop_search_fill_prob("click[red]", info)
    rng = np.random.default_rng(2)
    draws = [fill_webshop_search("search[...]", info, rng) for _ in range(6000)]
    for q in ("search[red]", "search[red red]", "search[shoes red size]"):
        p = probs[q]
        assert abs(np.mean([d == q for d in draws]) - p) < 4 * math.sqrt(p * (1 - p) / len(draws)), q


def test_an_expert_without_an_action_is_named_with_env_task_and_step():
    from agents.envs import get_env_spec
    from agents.replay import ReplayPrefix
    import bipace_envs  # noqa: F401
    spec = get_env_spec("textcraft")
    env = ReplayPrefix(spec.make(max_steps=6, depths=(1,)))

    class Silent:                     # the env spec with an expert that gives up after one step
        expert = staticmethod(lambda e: spec.expert(e) if e.unwrapped.steps < 1 else [])
        reward_map = staticmethod(spec.reward_map)
    with pytest.raises(ExpertCannotAct, match=r"textcraft's expert has no action for task 'stick' "
                                              r"\(env seed 3\) at step 1"):
        play_episode(env, ScriptedPolicy(0.0), "textcraft", Silent, np.random.default_rng(0), "stick", 3, {})


def test_embeddings_reuse_each_episodes_cache_and_equal_a_full_forward_per_prompt():
    import torch
    from agents.capture import HiddenCapture
    from agents.models import load_policy
    from benchmarks.credit.scripted import embed_episodes
    torch.manual_seed(0)
    model, _ = load_policy("tiny")
    model.eval()
    base = torch.randint(5, 200, (30,))
    episode = [base, torch.cat([base, torch.randint(5, 200, (7,))]),                   # extends the last
               torch.cat([base[:20], torch.randint(5, 200, (9,))]), base[:12].clone()]   # cuts back into it
    got = embed_episodes(model, -2, [episode, episode[:1]])
    assert got[0].shape[0] == 4 and got[1].shape[0] == 1
    capture = HiddenCapture(model, -2)
    with torch.no_grad():
        for p, vec in zip(episode, got[0]):
            capture.arm()
            model(input_ids=p[None])
            want = torch.nn.functional.normalize(capture.value, dim=-1)[0].numpy()
            np.testing.assert_allclose(vec, want, atol=2e-5)
    capture.remove()
    assert not np.allclose(got[0][0], got[0][2])


ARGS = ["--preset", "smoke", "--set", "max_steps=6", "--set", "history_length=6", "--tasks", "3",
        "--group-size", "3", "--samples", "3", "--screen-repeats", "3", "--candidates", "12", "--no-progress"]


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("aa") / "scripted"
    argv = ARGS + ["--policy", "scripted:0.6", "--out", str(out), "--workers", "1",
                   "--estimator", "benchmarks.credit.example_estimator:step_mean_baseline"]
    from estimators.registry import REGISTRY
    before = set(REGISTRY)
    assert aa.main(argv) == 0
    yield out
    for name in set(REGISTRY) - before:       # the user estimator it loaded: not a registered one for others
        del REGISTRY[name]


def test_a_scripted_run_scores_every_estimator_and_a_users_own(scripted_run):
    with open(scripted_run / "scores.csv") as f:
        rows = list(csv.DictReader(f))
    names = {r["estimator"] for r in rows}
    assert {"gigpo", "pace", "bigpo", "bipace", "gaca",
            "benchmarks.credit.example_estimator:step_mean_baseline"} <= names
    summary = (scripted_run / "summary.md").read_text()
    assert "scripted policy (the expert, eps 0.6 random" in summary
    assert "hcapo | n/a" in summary                 # no hindsight pass for a scripted policy: said, not run
    manifest = json.loads((scripted_run / "manifest.json").read_text())
    assert manifest["policy"] == "scripted:0.6" and manifest["embed_model"] == "tiny"
    import pickle
    saved = pickle.loads((scripted_run / "batch.pkl").read_bytes())
    b = saved["ro"].batch
    assert b.embedding.shape[0] == len(b) and np.allclose(np.linalg.norm(b.embedding, axis=1), 1, atol=1e-5)
    assert np.all(b.old_logp_sum <= 0) and np.any(b.old_logp_sum < 0)
    assert list(b.action_key) == [a.lower() for a in saved["ro"].actions]      # keys from the answers


def test_continuations_do_not_depend_on_how_many_workers_play_them(scripted_run, tmp_path):
    out = tmp_path / "two"
    out.mkdir()
    for name in ("screen.json", "goals.json", "batch.pkl"):       # the same batch: only the truth is redone
        (out / name).write_bytes((scripted_run / name).read_bytes())
    manifest = json.loads((scripted_run / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps(manifest))
    argv = ARGS + ["--policy", "scripted:0.6", "--out", str(out), "--workers", "2", "--resume",
                   "--estimators", "gigpo"]
    assert aa.main(argv) == 0
    one = sorted((scripted_run / "continuations.jsonl").read_text().splitlines())
    assert one == sorted((out / "continuations.jsonl").read_text().splitlines()) and len(one) > 10


def test_a_larger_k_continues_the_truth_and_plays_only_the_extra_continuations(scripted_run, tmp_path):
    import shutil
    out = tmp_path / "more"
    shutil.copytree(scripted_run, out, ignore=shutil.ignore_patterns(".lock"))
    before = (out / "continuations.jsonl").read_text().splitlines()
    k = json.loads((out / "manifest.json").read_text())["samples"]
    argv = list(ARGS)
    argv[argv.index("--samples") + 1] = str(k + 2)
    argv += ["--policy", "scripted:0.6", "--out", str(out), "--workers", "1", "--resume", "--estimators",
             "gigpo"]
    assert aa.main(argv) == 0
    after = (out / "continuations.jsonl").read_text().splitlines()
    assert after[:len(before)] == before                      # kept as they were
    assert len(after) == len(before) * (k + 2) // k           # two more for every distinct state
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["samples"] == k + 2 and manifest["grown"] == {"samples": [k, k + 2]}
    timing = json.loads((out / "timing.json").read_text())
    assert timing["mc_s_total"] > timing["mc_s_this_call"] > 0


def test_a_policy_that_wins_everything_or_nothing_is_refused_with_an_eps_to_try(tmp_path, capsys):
    long = [a if a != "max_steps=6" else "max_steps=40" for a in ARGS]
    assert aa.main(long + ["--policy", "scripted:0", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "won everything" in err and "raise eps, e.g. scripted:0.2" in err
    short = [a if a != "max_steps=6" else "max_steps=1" for a in ARGS]
    argv = short + ["--policy", "scripted:1", "--out", str(tmp_path / "b"), "--ingredients", "2+"]
    assert aa.main(argv) == 2
    err = capsys.readouterr().err
    assert "won nothing" in err and "lower eps, e.g. scripted:0.5" in err
    assert aa.main(ARGS + ["--policy", "scripted:2", "--out", str(tmp_path / "c")]) == 2
    assert "eps must lie in [0, 1]" in capsys.readouterr().err
    assert aa.main(ARGS + ["--policy", "mystery:1", "--out", str(tmp_path / "d")]) == 2
    assert "unknown policy spec 'mystery:1'" in capsys.readouterr().err


def test_a_user_estimator_with_the_wrong_shape_is_named(scripted_run, tmp_path, monkeypatch, capsys):
    (tmp_path / "bad_est.py").write_text("import numpy as np\ndef adv(batch, options):\n"
                                         "    return np.zeros((len(batch), 2))\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    for name in ("screen.json", "goals.json", "batch.pkl", "continuations.jsonl", "manifest.json"):
        (out / name).write_bytes((scripted_run / name).read_bytes())
    argv = ARGS + ["--policy", "scripted:0.6", "--out", str(out), "--resume", "--workers", "1",
                   "--estimators", "gigpo", "--estimator", "bad_est:adv"]
    assert aa.main(argv) == 2
    err = capsys.readouterr().err
    assert "'bad_est:adv' returned shape" in err and "expected (" in err
    from estimators.registry import REGISTRY
    REGISTRY.pop("bad_est:adv", None)


def test_named_cells_fill_what_the_command_line_leaves_out():
    from benchmarks.credit.cells import CELLS
    name = next(n for n, c in CELLS.items() if c.policy.startswith("scripted:"))
    args = aa.build_parser().parse_args(["--cell", name, "--tasks", "2"])
    aa_settings.apply_cell(args)
    cell = CELLS[name]
    assert (args.preset, args.policy, args.scripted) == (cell.preset, cell.policy, parse_policy(cell.policy))
    args = aa.build_parser().parse_args(["--cell", name, "--policy", "scripted:0.9"])
    aa_settings.apply_cell(args)
    assert args.scripted == ScriptedPolicy(0.9)
    args = aa.build_parser().parse_args([])
    aa_settings.apply_cell(args)
    assert (args.preset, args.policy, args.scripted) == ("textcraft-table", "", None)
    assert functools.reduce(lambda a, c: a and c.size.samples >= 2, CELLS.values(), True)


def test_cells_fill_their_splits_and_the_screen_plays_the_training_envs():
    from benchmarks.credit.cells import CELLS
    name = next(n for n, c in CELLS.items() if c.splits)
    args = aa.build_parser().parse_args(["--cell", name])
    aa_settings.apply_cell(args)
    assert args.splits == list(CELLS[name].splits)
    args = aa.build_parser().parse_args(["--cell", name, "--splits", "train"])
    aa_settings.apply_cell(args)
    assert args.splits == ["train"]
    # ALFWorld's preset scores on real validation games (eval_env_kwargs); the screen plays training goals,
    # so it must build the training env, not the held-out one
    args = aa.build_parser().parse_args(["--preset", "alfworld-table", "--policy", "scripted:0.5"])
    preset_cfg, cfg = aa.settings(args)
    assert preset_cfg.eval_env_kwargs != preset_cfg.env_kwargs
    assert cfg.eval_split == cfg.train_split and cfg.eval_env_kwargs == cfg.env_kwargs


def test_past_the_planner_timeout_the_choice_is_uniform_and_logged_so():
    info = {"admissible_actions": ["go to a", "go to b", "look", "go to b"], "expert_timed_out": True}
    rng = np.random.default_rng(0)
    policy = ScriptedPolicy(0.1)
    picks = [policy.choose(None, info, rng, "alfworld", lambda env: [], "here")[:2] for _ in range(400)]
    counts = {a: sum(p == a for p, _ in picks) for a in ("go to a", "go to b", "look")}
    assert 60 < counts["go to a"] < 140 and 150 < counts["go to b"] < 250
    assert {a: round(math.exp(lp), 6) for a, lp in picks} == {"go to a": 0.25, "go to b": 0.5, "look": 0.25}
    with pytest.raises(ExpertCannotAct):     # no plan and no timeout: still an error
        ScriptedPolicy(0.1).choose(None, {**info, "expert_timed_out": False}, rng, "alfworld",
                                   lambda env: [], "here")


def test_finished_goals_scores_the_leading_goals_a_stopped_run_completed(scripted_run, tmp_path, capsys):
    import pickle
    from benchmarks.credit.mc_truth import episodes_of, plan_starts
    saved = pickle.loads((scripted_run / "batch.pkl").read_bytes())
    per_goal = len(saved["tasks"]) // len(saved["goals"])
    plan = plan_starts(episodes_of(saved["ro"], saved["tasks"], saved["seeds"]))
    goal_of_key = {key: e // per_goal for (e, _), key in zip(plan.starts, plan.keys)}
    lines = (scripted_run / "continuations.jsonl").read_text().splitlines()

    def stopped_run(name, unfinished_goal):
        out = tmp_path / name
        out.mkdir()
        for f in ("screen.json", "goals.json", "batch.pkl", "manifest.json"):
            (out / f).write_bytes((scripted_run / f).read_bytes())
        # goal `unfinished_goal` lost one continuation of one state: it and every goal after it are unfinished
        drop = next(i for i, ln in enumerate(lines) if goal_of_key[json.loads(ln)["key"]] == unfinished_goal)
        (out / "continuations.jsonl").write_text("\n".join(lines[:drop] + lines[drop + 1:]) + "\n")
        return out

    out = stopped_run("two", 2)
    argv = ARGS + ["--policy", "scripted:0.6", "--out", str(out), "--resume", "--estimators", "gigpo", "pace",
                   "--finished-goals"]
    assert aa.main(argv) == 0
    assert "scored on the first 2 goals" in (out / "summary.md").read_text()
    with open(out / "rows.csv") as f:
        scored = list(csv.DictReader(f))
    assert len(scored) == int(np.sum(saved["ro"].env_index < 2 * per_goal))
    assert len(scored) < len(saved["ro"].batch)
    assert (out / "continuations.jsonl").read_text().count("\n") == len(lines) - 1     # nothing was played
    out = stopped_run("one", 1)
    assert aa.main(argv[:argv.index("--out") + 1] + [str(out)] + argv[argv.index("--out") + 2:]) == 2
    assert "--finished-goals: 1 goal(s) of 3 have K=3 continuations" in capsys.readouterr().err


def test_the_strata_truth_runs_on_the_same_batch_and_reports_its_reliability(scripted_run, tmp_path, capsys):
    out = tmp_path / "strata"
    out.mkdir()
    for name in ("screen.json", "goals.json", "batch.pkl"):       # the same batch: only the truth is redone
        (out / name).write_bytes((scripted_run / name).read_bytes())
    manifest = json.loads((scripted_run / "manifest.json").read_text())
    manifest.update(truth="strata", samples=4)
    (out / "manifest.json").write_text(json.dumps(manifest))
    argv = ARGS + ["--policy", "scripted:0.6", "--out", str(out), "--workers", "1", "--resume",
                   "--estimators", "gigpo", "pace", "--truth", "strata", "--samples", "4"]
    assert aa.main(argv) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "ground truth (strata)" in text and "expert suggestion was the one the batch recorded" in text
    summary = (out / "summary.md").read_text()
    assert "per distinct (state, recorded action) stratum" in summary
    assert "split-half (Spearman-Brown)" in summary and "disattenuated" in summary
    rel = json.loads((out / "reliability.json").read_text())
    assert rel["unbiased"] is not None and rel["unbiased"] <= 1
    import pickle
    from benchmarks.credit.score_inputs import ScoreInputs
    inputs, _ = ScoreInputs.load(out / "score_inputs.npz")
    b = pickle.loads((out / "batch.pkl").read_bytes())["ro"].batch
    certain = np.exp(b.old_logp_sum) >= 1 - 1e-9       # a recorded action the policy could not avoid
    assert np.all(inputs.adv[certain] == 0) and inputs.halves.shape == (2, len(b))
    assert aa.main(ARGS + ["--out", str(tmp_path / "m"), "--policy", "tiny", "--truth", "strata"]) == 2
    assert "needs a scripted policy" in capsys.readouterr().err
