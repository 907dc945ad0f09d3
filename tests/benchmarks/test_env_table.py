"""benchmarks/learning/env_table.py: every stage of the ALFWorld/WebShop table runs, is kept, continues."""
import json

import pytest

from benchmarks.learning import env_table
from benchmarks.learning.env_table_report import paired_change, wilson95


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


# webshop-table on the tiny model: 2 SFT steps, 1 RL iteration of 2 goals x G=2, 3 held-out test goals and
# the fixture's 5 goals x 8, 2 steps of 6 tokens; seconds a stage
TINY = sets("model=tiny", "sft_steps=2", "sft_episodes=4", "iterations=1", "batch_tasks=2", "group_size=2",
            "eval_tasks=3", "eval_batch=4", "max_steps=2", "history_length=2", "max_new_tokens=6",
            "threads=1", "lora_layers=2") + ["--seeds", "0", "--estimators", "gigpo", "--screen-tasks", "4"]


@pytest.fixture
def keep_torch_threads():
    import torch
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_webshop_table_runs_every_stage_keeps_them_and_refuses_other_settings(
        tmp_path, capsys, keep_torch_threads, monkeypatch):
    out = ["--out", str(tmp_path), "--resume"]
    # the tiny warm start wins nothing: the screen would stop the table, so RL samples every screened task
    env_table.main(out + ["--preset", "webshop-table"] + TINY + ["--screen-repeats", "0"])
    text = (tmp_path / "table.md").read_text()
    for row in ("| warm_start |", "| zero_shot |", "| gigpo_seed0 |"):
        assert row in text
    assert "## Held out: test" in text and "## Held out: fixture" in text
    assert text.count("| goal | warm_start | zero_shot | gigpo_seed0 |") == 2     # per option count, each set
    fixture = json.loads((tmp_path / "evals" / "warm_start__fixture.json").read_text())
    assert fixture["eval_n"] == 3 * 8           # eval_tasks=3 of the fixture's 5 goals x its 8 repeats
    test = json.loads((tmp_path / "evals" / "gigpo_seed0__test.json").read_text())
    assert test["eval_n"] == 3 and len(test["episodes"]["scores"]) == 3
    assert 0.0 <= test["eval_inadmissible"] <= 1.0
    assert (tmp_path / "gigpo_seed0" / "adapter").is_dir()
    assert (tmp_path / "curves.png").exists()

    # a rerun without --resume would mix two tables in one folder: refused before any work
    with pytest.raises(SystemExit):
        env_table.main(["--out", str(tmp_path), "--screen-repeats", "0"])
    assert "is not empty" in capsys.readouterr().err and (tmp_path / "table.md").read_text() == text
    # a rerun plays nothing again: every stage is kept
    from agents.trainer import Trainer

    def refuse(*a, **k):
        raise AssertionError("a kept stage ran again")
    monkeypatch.setattr(Trainer, "evaluate", refuse)
    monkeypatch.setattr(Trainer, "train", refuse)
    env_table.main(out + ["--screen-repeats", "0", "--seeds", "0", "--estimators", "gigpo"])
    assert "| gigpo_seed0 |" in capsys.readouterr().out

    # what each episode did is kept, so two policies can be compared episode by episode
    assert [len(a) for a in test["episodes"]["actions"]] == test["episodes"]["lengths"]
    env_table.main(out + ["--compare", "warm_start", "gigpo_seed0"])
    shown = capsys.readouterr().out
    assert "## test\nwarm_start -> gigpo_seed0, 3 episodes:" in shown and "## fixture" in shown
    with pytest.raises(SystemExit):
        env_table.main(out + ["--compare", "warm_start", "bipace_seed0"])
    assert "policies scored in" in capsys.readouterr().err

    with pytest.raises(SystemExit):
        env_table.main(out + sets("lr=1e-4"))
    assert "measured with other settings" in capsys.readouterr().err


def test_settings_errors_name_the_problem(tmp_path, capsys):
    with pytest.raises(SystemExit):
        env_table.main(["--out", str(tmp_path), "--preset", "textcraft-table"])
    assert "has no held-out sets" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        env_table.main(["--out", str(tmp_path), "--preset", "webshop-table", "--set", "nonsense=1"])
    assert "--set expects FIELD=VALUE" in capsys.readouterr().err
    for only in (["--report"], ["--compare", "warm_start", "zero_shot"]):   # nothing built there yet
        with pytest.raises(SystemExit):
            env_table.main(["--out", str(tmp_path / "none"), "--preset", "webshop-table", *only])
        assert "holds no table yet" in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_alfworld_held_out_sets_are_the_real_games_grouped_by_task_type():
    spec = env_table.TABLES["alfworld-table"]
    assert [h.split for h in spec.held_out] == ["valid_seen", "valid_unseen"]
    assert spec.group_of("valid_seen/pick_two_obj_and_place-Box-None-CoffeeTable-207/trial_T1") == \
        "pick_two_obj_and_place"
    assert spec.group_of("gen/train/look_at_obj_in_light/00003") == "look_at_obj_in_light"
    from agents.presets import get_preset
    cfg = get_preset("alfworld-table")
    fields = env_table.eval_fields(cfg, spec.held_out[1])
    assert fields["eval_split"] == "valid_unseen"
    assert json.loads(fields["eval_env_kwargs"])["games_per_task"] == 10
    assert env_table.eval_fields(cfg, None)["eval_env_kwargs"] == "{}"      # the screen plays training games


def test_webshop_goals_are_grouped_by_the_options_their_purchase_must_choose(shared_dir):
    import gymnasium as gym
    import bipace_envs  # noqa: F401
    group = env_table.TABLES["webshop-table"].group_of
    fixture = dict(env_table.WEBSHOP_FIXTURE_KWARGS, data_dir=str(shared_dir / "data" / "webshop-fixture"))
    for kwargs in ({}, fixture):
        env = gym.make("bipace/WebShop-v0", split="test", **kwargs)
        goals = env.unwrapped.goals
        env.close()
        counts = [len(g["goal_options"]) for g in goals[:40]]
        assert [group(str(k), kwargs) for k in range(len(counts))] == \
            [f"{n} option{'' if n == 1 else 's'}" for n in counts]
        if kwargs == {}:
            assert len(set(counts)) == 3          # the generated goals have 0, 1 and 2 options


def test_a_report_run_where_the_fixture_is_not_says_so_and_keeps_the_other_tables(tmp_path, monkeypatch):
    from agents.presets import get_preset
    from benchmarks.learning.env_table_report import markdown
    for held in ("test", "fixture"):
        ev = {"episodes": {"tasks": ["0", "1"], "won": [1, 0], "scores": [1.0, 0.5]}, "eval_success": 0.5,
              "wall_s": 6.0}
        (tmp_path / "evals").mkdir(exist_ok=True)
        (tmp_path / "evals" / f"warm_start__{held}.json").write_text(json.dumps(ev))
    monkeypatch.chdir(tmp_path)                  # the preset's fixture folder is relative to the repo root
    text, _ = markdown(tmp_path, env_table.TABLES["webshop-table"], get_preset("webshop-table"), [])
    assert "| goal | warm_start |" in text                     # the generated test goals still grouped
    assert "(no per-goal table for fixture: WebShop data check failed" in text
    assert "## Held out: fixture" in text


def test_the_report_says_which_groups_the_screen_won(tmp_path):
    from agents.presets import get_preset
    from benchmarks.learning.env_table_report import markdown
    by_task = {"gen/train/look_at_obj_in_light/00001": [1, 1], "gen/train/look_at_obj_in_light/00002": [0, 1],
               "gen/train/pick_heat_then_place_in_recep/00001": [0, 1]}
    (tmp_path / "screen.json").write_text(json.dumps({"by_task": by_task, "wall_s": 120.0}))
    text, _ = markdown(tmp_path, env_table.TABLES["alfworld-table"], get_preset("alfworld-table"), [])
    assert "won 1 of 3 screened training tasks at least once (2.0 min)" in text
    assert "| look_at_obj_in_light | 1/2 |" in text and "| pick_heat_then_place_in_recep | 0/1 |" in text


def test_the_rl_runs_table_says_what_a_run_has_before_it_has_two_iterations(tmp_path):
    from agents.presets import get_preset
    from benchmarks.learning.env_table_report import markdown

    def train_csv(run, success):
        (tmp_path / run).mkdir()
        rows = ["iteration,success,rollout_s,estimator_s,update_s"]
        rows += [f"{i + 1},{s},30,0,30" for i, s in enumerate(success)]
        (tmp_path / run / "train.csv").write_text("\n".join(rows) + "\n")

    train_csv("gigpo_seed0", [0.25])
    train_csv("bipace_seed0", [0.2, 0.4, 0.5, 0.7])
    train_csv("gigpo_seed1", [])                                # header only: started, nothing finished
    runs = [("gigpo", 0), ("bipace", 0), ("gigpo", 1)]
    text, data = markdown(tmp_path, env_table.TABLES["webshop-table"], get_preset("webshop-table"), runs)
    assert "| gigpo_seed0 | 1/" in text and "| 25% (one iteration so far) | 1.0 |" in text
    assert "| 30% -> 60% | 4.0 |" in text                      # first and last 2 of 4 iterations
    assert "| gigpo_seed1 | 0/" in text and "- (no iteration yet)" in text
    assert "nan" not in text
    first = {r["run"]: r["first"] for r in data["runs"]}
    assert first["gigpo_seed0"] is None and first["bipace_seed0"] == pytest.approx(0.3)
    json.dumps(data, allow_nan=False)                           # results.json stays valid JSON


def test_report_statistics():
    lo, hi = wilson95(0, 20)
    assert lo == 0.0 and 0.1 < hi < 0.2          # an interval above 0 even with no success
    lo, hi = wilson95(10, 20)
    assert lo < 0.5 < hi and abs((lo + hi) / 2 - 0.5) < 1e-9
    base = {"episodes": {"tasks": ["a", "b", "c", "d"], "won": [0, 0, 1, 0]}}
    other = {"episodes": {"tasks": ["a", "b", "c", "d"], "won": [1, 0, 1, 1]}}
    mean, half = paired_change(base, other)
    assert mean == pytest.approx(0.5) and half > 0
    assert paired_change(base, {"episodes": {"tasks": ["x"], "won": [1]}}) is None


def test_report_pairs_the_warm_start_with_zero_shot_and_pools_alfworlds_two_sets(tmp_path):
    from agents.presets import get_preset
    from benchmarks.learning.env_table_report import markdown

    def write(policy, held, won):
        tasks = [f"{held}/pick_and_place_simple-{k}/trial" for k in range(len(won))]
        ev = {"episodes": {"tasks": tasks, "won": won, "scores": [float(w) for w in won]},
              "eval_success": sum(won) / len(won), "eval_inadmissible": 0.1, "wall_s": 60.0}
        (tmp_path / "evals").mkdir(exist_ok=True)
        (tmp_path / "evals" / f"{policy}__{held}.json").write_text(json.dumps(ev))

    write("zero_shot", "valid_seen", [0] * 6)
    write("zero_shot", "valid_unseen", [0] * 6)
    write("warm_start", "valid_seen", [1, 1, 0, 0, 0, 0])
    write("warm_start", "valid_unseen", [1, 0, 0, 0, 0, 0])
    write("gigpo_seed0", "valid_seen", [1, 1, 1, 0, 0, 0])      # not scored on valid_unseen yet
    text, data = markdown(tmp_path, env_table.TABLES["alfworld-table"], get_preset("alfworld-table"),
                          [("gigpo", 0)])
    pooled = data["held_out"]["all held-out sets"]
    assert pooled["warm_start"]["n"] == 12 and pooled["warm_start"]["success"] == pytest.approx(3 / 12)
    assert "gigpo_seed0" not in pooled                         # only policies scored on every set
    assert pooled["warm_start"]["paired_with"] == "zero_shot"
    assert pooled["warm_start"]["paired_change"][0] == pytest.approx(3 / 12)
    seen = data["held_out"]["valid_seen"]
    assert seen["gigpo_seed0"]["paired_with"] == "warm_start"
    assert seen["gigpo_seed0"]["paired_change"][0] == pytest.approx(1 / 6)
    assert seen["zero_shot"]["paired_change"] is None
    assert "## Held out: all held-out sets" in text and "vs zero shot" in text and "vs warm start" in text


def test_alfworld_table_trains_on_generated_games_and_scores_real_ones_by_task_type(
        tmp_path, shared_dir, keep_torch_threads):
    pytest.importorskip("alfworld")
    cache = str(tmp_path / "games")        # generated games of this test only, not the user's cache
    data = str(shared_dir / "data" / "alfworld")
    kwargs = sets(f'env_kwargs={{"games_per_task": 1, "task_types": [1, 2], "cache_dir": "{cache}"}}',
                  f'eval_env_kwargs={{"data_dir": "{data}", "games_per_task": 1}}')
    tiny = [a for a in TINY if a not in ("--screen-tasks", "4")]
    env_table.main(["--out", str(tmp_path / "t"), "--preset", "alfworld-table", "--screen-repeats", "0",
                    "--skip-zero-shot"] + tiny + kwargs)
    text = (tmp_path / "t" / "table.md").read_text()
    assert "## Held out: valid_seen" in text and "## Held out: valid_unseen" in text
    assert "| pick_and_place_simple |" in text and "| look_at_obj_in_light |" in text    # one row per type
    seen = json.loads((tmp_path / "t" / "evals" / "gigpo_seed0__valid_seen.json").read_text())
    assert all(t.startswith("valid_seen/") for t in seen["episodes"]["tasks"])
    assert len({env_table.alfworld_task_type(t) for t in seen["episodes"]["tasks"]}) == 2
    assert (tmp_path / "t" / "gigpo_seed0" / "train.csv").exists()


def test_the_warm_start_takes_every_sft_setting_of_the_table(tmp_path, monkeypatch):
    # sft_episodes was once left out, so the WebShop warm start rendered all 6,718 training goals
    import agents.sft
    from agents.presets import get_preset
    from benchmarks.warm_start import build_warm_start
    seen = {}
    monkeypatch.setattr(agents.sft, "run_sft", lambda cfg, *a, **k: seen.update(cfg=cfg))
    build_warm_start(get_preset("webshop-table", ["model=tiny"]), tmp_path / "warm")
    assert seen["cfg"].sft_episodes == 300 and seen["cfg"].sft_steps == 300
    assert not seen["cfg"].gradient_checkpointing
    lean = get_preset("webshop-table", ["model=tiny", "gradient_checkpointing=true"])
    build_warm_start(lean, tmp_path / "w2")
    assert seen["cfg"].gradient_checkpointing                 # the memory-saving setting reaches the SFT
