"""Exact resume: the same settings, every log cut back to the checkpoint, the summary of every part, a
corrupt checkpoint skipped, a half-written log line tolerated, a fresh rerun without stale lines."""
import csv
import io
import json

import pytest
import torch

from agents.config import TrainConfig
from agents.trainer import Trainer
from fake_env import FakeCraftEnv


def _cfg(out, **kw):
    base = dict(env="textcraft", estimator="bipace", model="tiny", out_dir=str(out), batch_tasks=2,
                group_size=2, max_new_tokens=6, max_steps=3, iterations=3, eval_every=1, eval_tasks=2,
                eval_batch=2, checkpoint_every=1, lora_rank=4, lora_alpha=8, lr=1e-2, mini_batch_rows=4,
                micro_batch_rows=3, tensorboard=False, progress=False)
    return TrainConfig(**{**base, **kw})


class Killed(Exception):
    pass


def _trainer(cfg, stop_at_checkpoint=None):
    class Stoppable(Trainer):
        def save_checkpoint(self, it):
            if it == stop_at_checkpoint:
                raise Killed(it)             # as a kill while the checkpoint is written
            return super().save_checkpoint(it)
    return Stoppable(cfg, make_env=lambda: FakeCraftEnv(max_steps=3), train_tasks=list(range(8)),
                     eval_tasks=[8, 9])


def _without_seconds(path):
    rows = list(csv.reader(io.StringIO(path.read_text())))
    keep = [k for k, name in enumerate(rows[0]) if not name.endswith("_s")]
    return [[row[k] for k in keep] for row in rows]


def _adapter(folder):
    from safetensors.torch import load_file
    return load_file(str(folder / "adapter" / "adapter_model.safetensors"))


def test_resume_refuses_changed_settings_and_names_them(tmp_path):
    tr = _trainer(_cfg(tmp_path))
    tr.iteration(1)
    tr.save_checkpoint(1)
    for change, named in [({"lr": 0.5}, "lr: 0.01 -> 0.5"), ({"estimator": "grpo"}, "estimator: 'bipace' -> "
                          "'grpo'"), ({"lora_rank": 8}, "lora_rank: 4 -> 8"),
                          # CPU sums round by thread count: another one would not continue the same run
                          ({"threads": 2}, "threads: 1 -> 2")]:
        with pytest.raises(ValueError, match="other settings: " + named.replace("(", r"\(")):
            _trainer(_cfg(tmp_path, resume=True, **change))
    resumed = _trainer(_cfg(tmp_path, resume=True, iterations=5, progress=True))      # allowed changes
    assert resumed.start_iteration == 2
    assert resumed.optimizer.param_groups[0]["lr"] == 1e-2


def test_a_run_stopped_mid_checkpoint_resumes_to_the_logs_of_an_uninterrupted_one(tmp_path):
    straight = _trainer(_cfg(tmp_path / "a")).train()
    with pytest.raises(Killed):                      # logs of iteration 2 written, its checkpoint not
        _trainer(_cfg(tmp_path / "b"), stop_at_checkpoint=2).train()
    assert len((tmp_path / "b" / "eval_by_task.jsonl").read_text().splitlines()) == 3     # 0, 1, 2
    resumed = _trainer(_cfg(tmp_path / "b", resume=True))
    assert resumed.start_iteration == 2
    summary = resumed.train()
    a, b = tmp_path / "a", tmp_path / "b"
    for name in ("eval.csv", "eval_by_task.jsonl"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert _without_seconds(a / "train.csv") == _without_seconds(b / "train.csv")
    assert all(torch.equal(v, _adapter(b)[k]) for k, v in _adapter(a).items())
    # summary.json: eval_before of the first part, seconds of both parts
    assert summary["eval_before"] == straight["eval_before"] is not None
    first_part = torch.load(b / "checkpoints" / "iter_000001" / "state.pt", weights_only=False)["record"]
    assert len(summary["wall_s_parts"]) == 2 and summary["wall_s_parts"][0] == first_part["wall_s_parts"][0]
    assert summary["wall_s"] == pytest.approx(sum(summary["wall_s_parts"]))
    assert json.loads((b / "summary.json").read_text()) == summary


def test_a_corrupt_latest_checkpoint_falls_back_to_the_one_before(tmp_path, capsys):
    tr = _trainer(_cfg(tmp_path))
    for it in (1, 2):
        tr.iteration(it)
        tr.save_checkpoint(it)
    state = tmp_path / "checkpoints" / "iter_000002" / "state.pt"
    state.write_bytes(state.read_bytes()[:len(state.read_bytes()) // 2])          # cut mid-write
    assert _trainer(_cfg(tmp_path, resume=True)).start_iteration == 2
    assert f"warning: checkpoint {state.parent} does not read back" in capsys.readouterr().out
    adapter = tmp_path / "checkpoints" / "iter_000001" / "adapter" / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"no checkpoint of .* reads back: .*iter_000002 .*iter_000001"):
        _trainer(_cfg(tmp_path, resume=True))


def test_a_half_written_last_log_line_is_tolerated(tmp_path):
    _trainer(_cfg(tmp_path, iterations=2)).train()
    expected = {name: (tmp_path / name).read_text() for name in ("train.csv", "eval_by_task.jsonl")}
    with open(tmp_path / "train.csv", "a") as f:
        f.write("-0.01,0.0,0.")                     # killed while appending iteration 3's row
    with open(tmp_path / "eval_by_task.jsonl", "a") as f:
        f.write('{"iteration": 3, "by_t')
    _trainer(_cfg(tmp_path, iterations=3, resume=True)).train()
    for name, before in expected.items():
        assert (tmp_path / name).read_text().startswith(before)      # the cut line went, the rest was kept
    rows = list(csv.DictReader(open(tmp_path / "train.csv")))
    assert [r["iteration"] for r in rows] == ["1", "2", "3"]
    # iteration 2, evaluated after the first part's last checkpoint, is evaluated again mid-run
    assert [json.loads(line)["iteration"] for line in open(tmp_path / "eval_by_task.jsonl")] == [0, 1, 2, 3]


def test_logs_of_checkpoints_without_recorded_sizes_are_cut_by_iteration(tmp_path):
    from agents.train_log import cut_to_iteration
    log = tmp_path / "train.csv"
    log.write_text("loss,iteration\n0.5,1\n0.4,2\n0.3,3\n0.")
    cut_to_iteration(log, 2)
    assert log.read_text() == "loss,iteration\n0.5,1\n0.4,2\n"
    jsonl = tmp_path / "eval_by_task.jsonl"
    jsonl.write_text('{"iteration": 0}\n{"iteration": 2}\n{"iteration": 3}\n{"iter')
    cut_to_iteration(jsonl, 2)
    assert jsonl.read_text() == '{"iteration": 0}\n{"iteration": 2}\n'


def test_a_fresh_run_into_a_used_folder_starts_over_without_stale_lines(tmp_path, capsys):
    _trainer(_cfg(tmp_path, iterations=2)).train()
    _trainer(_cfg(tmp_path, iterations=2, seed=1)).train()       # the Python API: no --resume, same folder
    assert "held an earlier run's" in capsys.readouterr().out
    lines = [json.loads(line) for line in open(tmp_path / "eval_by_task.jsonl")]
    assert [r["iteration"] for r in lines] == [0, 1, 2]
    assert [r["iteration"] for r in csv.DictReader(open(tmp_path / "train.csv"))] == ["1", "2"]
    assert json.loads((tmp_path / "summary.json").read_text())["seed"] == 1
