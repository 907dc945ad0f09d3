import dataclasses
import subprocess
import sys

import torch

from agents.cli import main
from agents.config import TrainConfig, build_parser
from agents.envs import get_env_spec
from agents.prompts import PromptSettings, make_prompter
from agents.sft import expert_examples, sft
from fake_env import FakeCraftEnv


def test_help_documents_every_option():
    text = build_parser(prog="bipace-train").format_help()
    for f in dataclasses.fields(TrainConfig):
        assert "--" + f.name.replace("_", "-") in text
    assert "--no-progress" in text


def test_cli_reports_bad_input(capsys):
    assert main(["--env", "nethack"]) == 2
    assert "unknown env" in capsys.readouterr().err
    assert main(["--env-kwargs", "[1, 2]"]) == 2


def test_console_script_help_runs():
    out = subprocess.run([sys.executable, "-m", "agents.cli", "--help"], capture_output=True, text=True, check=True)
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
