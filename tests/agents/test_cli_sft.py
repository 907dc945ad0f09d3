import dataclasses
import subprocess
import sys

import torch

from agents.cli import main
from agents.config import TrainConfig
from agents.envs import get_env_spec
from agents.prompts import PromptSettings, make_prompter
from agents.sft import expert_examples, sft
from fake_env import FakeCraftEnv


def test_help_documents_every_option():
    from agents.presets import cli_parser
    text = cli_parser(prog="bipace-train").format_help()
    for f in dataclasses.fields(TrainConfig):
        if f.name != "preset_name":          # set by --preset
            assert "--" + f.name.replace("_", "-") in text
    assert "--no-progress" in text and "--preset" in text and "textcraft-table" in text


def test_cli_reports_bad_input(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--env", "nethack"]) == 2
    assert "unknown env" in capsys.readouterr().err
    assert main(["--env-kwargs", "[1, 2]"]) == 2
    assert main(["--estimator", "nope"]) == 2
    assert not (tmp_path / "runs").exists()          # a refused run writes nothing


def test_console_script_help_runs():
    out = subprocess.run([sys.executable, "-m", "agents.cli", "--help"], capture_output=True, text=True,
                         check=True)
    assert "--estimator" in out.stdout and "--resume" in out.stdout


def test_expert_examples_use_rl_prompts_and_sft_learns_them(tiny):
    from agents.models import load_policy
    model, tok = load_policy("tiny")
    spec = get_env_spec("textcraft")
    prompter = make_prompter("textcraft", PromptSettings(require_think=False))
    ex = expert_examples(spec, lambda: FakeCraftEnv(max_steps=3), [0, 1, 2], prompter, tok, max_steps=3)
    assert len(ex) == 6                               # get + craft per task
    assert ex[0].response == "<action>get 1 stick</action><|im_end|>"
    assert ex[0].prompt.endswith("<|im_start|>assistant\n")
    torch.manual_seed(0)
    losses = sft(model, tok, ex, steps=30, lr=3e-3, batch=6, log=None)
    assert losses[-1] < 0.5 * losses[0]


def test_step_accuracy_counts_the_answers_greedy_decoding_reproduces(tiny):
    from agents.models import load_policy
    from agents.sft import step_accuracy
    model, tok = load_policy("tiny")
    spec = get_env_spec("textcraft")
    prompter = make_prompter("textcraft", PromptSettings(require_think=False))
    ex = expert_examples(spec, lambda: FakeCraftEnv(max_steps=3), list(range(6)), prompter, tok, max_steps=3)
    torch.manual_seed(0)
    assert step_accuracy(model, tok, ex) == 0.0
    sft(model, tok, ex[:6], steps=100, lr=3e-3, batch=6, log=None)    # tasks 0-2 only
    acc = step_accuracy(model, tok, ex, batch=5)
    assert step_accuracy(model, tok, ex[:6]) > step_accuracy(model, tok, ex[6:])
    greedy = []
    for e in ex:
        enc = tok(e.prompt, add_special_tokens=False, return_tensors="pt")
        target = tok(e.response, add_special_tokens=False)["input_ids"]
        out = model.generate(**enc, max_new_tokens=len(target), do_sample=False,
                             pad_token_id=tok.pad_token_id)
        greedy.append(out[0, enc["input_ids"].shape[1]:].tolist() == target)
    assert 0 < acc < 1 and acc == sum(greedy) / len(ex)


def test_run_sft_logs_held_out_and_train_step_accuracy(tmp_path, capsys):
    from agents.sft import run_sft
    spec = get_env_spec("textcraft")
    cfg = TrainConfig(env="textcraft", model="tiny", sft_steps=10, sft_lr=3e-3, sft_batch=4, sft_probe=2,
                      max_steps=3,
                      out_dir=str(tmp_path))
    settings = PromptSettings(require_think=False)

    def make():
        return FakeCraftEnv(max_steps=3)

    run_sft(cfg, spec, make, [0, 1, 2, 3], tmp_path / "ws", settings, held_out=[8, 9])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("sft step")]
    assert len(lines) == 10
    assert all("step accuracy held-out" in ln and "step accuracy train" in ln for ln in lines)
    import pytest
    with pytest.raises(ValueError, match="sft_probe"):
        run_sft(dataclasses.replace(cfg, sft_probe=-1), spec, make, [0], tmp_path / "ws2", settings)


def _textcraft_examples(tok, tasks):
    prompter = make_prompter("textcraft", PromptSettings(require_think=False))
    return expert_examples(get_env_spec("textcraft"), lambda: FakeCraftEnv(max_steps=3), tasks, prompter, tok,
                           max_steps=3)


def test_a_stopped_sft_continues_from_its_checkpoint_to_the_same_weights(tiny, tmp_path):
    import pytest
    from agents.models import load_policy

    class Stopped(Exception):
        pass

    def stop_at_step_5(line):
        if line.startswith("sft step 5/"):
            raise Stopped

    def fresh():
        torch.manual_seed(0)
        return load_policy("tiny")

    model, tok = fresh()
    ex = _textcraft_examples(tok, list(range(6)))
    whole = sft(model, tok, ex, steps=8, lr=3e-3, batch=4, seed=1, log=None)
    stopped, _ = fresh()
    folder = tmp_path / "ck"
    with pytest.raises(Stopped):
        sft(stopped, tok, ex, steps=8, lr=3e-3, batch=4, seed=1, log=stop_at_step_5,
            checkpoint_dir=folder, checkpoint_every=3)
    assert (folder / "state.pt").exists()
    resumed, _ = fresh()
    lines = []
    losses = sft(resumed, tok, ex, steps=8, lr=3e-3, batch=4, seed=1, log=lines.append,
                 checkpoint_dir=folder, checkpoint_every=3)
    assert lines[0].startswith("sft: continuing from the checkpoint of step 3/8")
    assert len(lines) == 1 + 5                          # steps 4-8 ran again, 1-3 did not
    assert losses == whole
    for (name, a), b in zip(model.named_parameters(), resumed.parameters()):
        assert torch.equal(a, b), name
    for lr, examples in ((1e-3, ex), (3e-3, ex[1:] + ex[:1])):    # another lr, other examples
        other, _ = fresh()
        with pytest.raises(ValueError, match="another SFT run"):
            sft(other, tok, examples, steps=8, lr=lr, batch=4, seed=1, log=None, checkpoint_dir=folder,
                checkpoint_every=3)


def test_run_sft_removes_its_checkpoints_once_the_warm_start_is_saved(tmp_path):
    from agents.sft import run_sft
    cfg = TrainConfig(env="textcraft", model="tiny", sft_steps=4, sft_lr=3e-3, sft_batch=4, max_steps=3,
                      sft_checkpoint_every=2, out_dir=str(tmp_path))
    run_sft(cfg, get_env_spec("textcraft"), lambda: FakeCraftEnv(max_steps=3), [0, 1, 2], tmp_path / "ws",
            PromptSettings(require_think=False))
    assert (tmp_path / "ws" / "config.json").exists() and not (tmp_path / "ws.sft_checkpoint").exists()
