"""Every launch we ship passes verl's own ``validate_config``, run the way ``agents.verl_bridge.main`` runs
it before Ray starts: the example config composed by hydra over verl's ``ppo_trainer.yaml``, with each
launch script's own overrides (the scripts run for real, with ``BIPACE_VERL_CHECK_ONLY=1`` so nothing
starts after the check). A config verl refuses stops before Ray with verl's message and the line that
sets the offending key."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra: pip install -e \".[verl]\"")
from hydra import compose, initialize_config_dir  # noqa: E402

from agents.verl_bridge.validation import AGENT_LOOP_YAML, ConfigRejected, validate_launch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "verl"
EXAMPLE = EXAMPLES / "alfworld_qwen1.5b.yaml"
LOOP = f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_YAML}"


def compose_in(folder: Path, name: str, overrides):
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(name, overrides=list(overrides))


def run_script(script: str, *args, run_dir: Path, **env):
    """A launch script as a user runs it, checking only (BIPACE_VERL_CHECK_ONLY=1), with this Python;
    Hydra's run folder (``outputs/`` in the checkout by default) goes to ``run_dir``."""
    full_env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    full_env.update(BIPACE_VERL_CHECK_ONLY="1", PYTHON=sys.executable, **env)
    return subprocess.run(["bash", str(EXAMPLES / script), *args, f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, env=full_env, cwd=REPO, timeout=300)


@pytest.mark.parametrize("estimator", ["gigpo", "bipace"])
def test_example_config_passes_verls_validation(estimator):
    overrides = [LOOP, f"algorithm.adv_estimator={estimator}", "trainer.n_gpus_per_node=8"]
    cfg = compose_in(EXAMPLES, EXAMPLE.stem, overrides)
    validate_launch(cfg, str(EXAMPLE), overrides)
    # what one optimiser step takes in verl's V1 trainer: mini-batch (tasks) x rollout.n step samples
    actor = cfg.actor_rollout_ref.actor
    assert cfg.data.train_batch_size >= actor.ppo_mini_batch_size
    assert actor.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n == 128


@pytest.mark.parametrize("script,args,env", [
    ("run_alfworld_1node.sh", ["8", "bipace"], {}),
    ("run_alfworld_2nodes.sh", ["gigpo"], {"RAY_ADDRESS": "127.0.0.1:1"}),   # never contacted: check only
    ("run_alfworld_1gpu.sh", ["bipace"], {"MODEL_PATH": "/models/Qwen2.5-0.5B-Instruct"}),
    ("run_alfworld_1gpu.sh", ["gigpo", "actor_rollout_ref.model.path=/models/Qwen2.5-1.5B-Instruct"],
     {"MODEL_PATH": "/models/Qwen2.5-0.5B-Instruct"}),
])
def test_launch_scripts_pass_verls_validation(script, args, env, tmp_path):
    out = run_script(script, *args, run_dir=tmp_path, **env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "[validate_config] All configuration checks passed successfully!" in out.stdout
    assert "config OK" in out.stdout and "ray init kwargs" not in out.stdout


def test_one_gpu_script_is_one_gpu_with_a_local_model(tmp_path):
    text = (EXAMPLES / "run_alfworld_1gpu.sh").read_text()
    assert "run_alfworld_1node.sh 1 " in text and 'actor_rollout_ref.model.path="$MODEL_PATH"' in text
    out = run_script("run_alfworld_1gpu.sh", "gigpo", run_dir=tmp_path, MODEL_PATH="")
    assert out.returncode != 0 and "set MODEL_PATH" in out.stderr


def test_a_config_verl_refuses_names_the_example_line(tmp_path):
    """The example as it was (ppo_mini_batch_size 256 > train_batch_size 16) is refused with verl's message
    and the example's line, in process and through main before Ray starts."""
    bad = tmp_path / EXAMPLE.name
    text = EXAMPLE.read_text()
    lines = text.splitlines()
    line = next(i for i, ln in enumerate(lines) if ln.strip().startswith("ppo_mini_batch_size:")) + 1
    lines[line - 1] = "    ppo_mini_batch_size: 256"
    bad.write_text("\n".join(lines) + "\n")
    cfg = compose_in(tmp_path, bad.stem, [LOOP])
    with pytest.raises(ConfigRejected) as err:
        validate_launch(cfg, str(bad), [LOOP])
    msg = str(err.value)
    assert "train_batch_size (16) must be >= actor.ppo_mini_batch_size (256)" in msg     # verl's own words
    assert f"{bad}:{line}: ppo_mini_batch_size: 256" in msg
    data_line = next(i for i, ln in enumerate(lines) if ln.strip().startswith("train_batch_size:")) + 1
    assert f"{bad}:{data_line}: train_batch_size: 16" in msg
    # through the entry point, as a user launches it: refused before ray.init
    out = subprocess.run([sys.executable, "-m", "agents.verl_bridge.main", "--config-path", str(tmp_path),
                          "--config-name", bad.stem, LOOP, f"hydra.run.dir={tmp_path / 'run'}"],
                         capture_output=True, text=True, cwd=REPO, timeout=300,
                         env={**os.environ, "BIPACE_VERL_CHECK_ONLY": "0"})
    assert out.returncode != 0
    assert "config rejected before starting Ray" in out.stderr
    assert f"{bad}:{line}: ppo_mini_batch_size: 256" in out.stderr
    assert "ray init kwargs" not in out.stdout


def test_an_override_verl_refuses_is_named():
    overrides = [LOOP, "data.train_batch_size=4"]
    cfg = compose_in(EXAMPLES, EXAMPLE.stem, overrides)
    with pytest.raises(ConfigRejected, match=r"(?s)must be >= actor.ppo_mini_batch_size.*command line: "
                                             r"data.train_batch_size=4"):
        validate_launch(cfg, str(EXAMPLE), overrides)
    with pytest.raises(ConfigRejected, match="trainer.v1.trainer_mode=sync"):
        overrides = [LOOP, "trainer.v1.trainer_mode=bipace_sync"]
        validate_launch(compose_in(EXAMPLES, EXAMPLE.stem, overrides), str(EXAMPLE), overrides)
