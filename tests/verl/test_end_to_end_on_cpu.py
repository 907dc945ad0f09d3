"""The whole verl run on a CPU, through verl's real entry point: ``python -m agents.verl_bridge.main``.

Hydra config (our example over verl's ``ppo_trainer.yaml``), verl's validation, a local Ray, verl's
V1 TaskRunner (ours: the ``sync`` trainer is ``BipacePPOTrainer`` in its process), verl's FSDP2 actor
worker (``BipaceActorRolloutRefWorker``: the hidden-state tap in the old-log-prob forward), verl's
TransferQueue, verl's agent-loop workers running ``bipace_env`` on our real TextCraft env, our BiPACE
advantage step on the real per-step data, one actor update per step on the tiny model, 2 training
steps, then one validation. The one replaced part is the generation server: ``rollout.name=hf``,
transformers ``generate`` registered through verl's rollout registries, with verl's ``cpu`` platform
plugin (``agents.verl_bridge.cpu_backend``, loaded by verl's ``VERL_USE_EXTERNAL_MODULES``).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra: pip install -e \".[verl]\"")

from agents.verl_bridge.dataset import split_rows, write  # noqa: E402
from agents.verl_bridge.validation import AGENT_LOOP_YAML  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


LOOP_YAML = """- name: bipace_env
  _target_: agents.verl_bridge.agent_loop.BipaceEnvAgentLoop
  max_steps: 3
  history_length: 2
  require_think: false     # the tiny policy answers <action>...</action> only
  compact: true
  key_kind: action_tag
"""
SETTINGS = dict(history_length=2, require_think=False, compact=True)     # the same, for the warm start


def cpu_overrides(tmp: Path, model: str, loop_yaml: str = AGENT_LOOP_YAML, estimator: str = "bipace",
                  steps: int = 2) -> list[str]:
    """The example config made CPU-sized: 3 tasks x 2 episodes of <= 3 steps, 24-token answers; one
    optimiser step per 2 tasks x 2 = 4 step samples, so 18 samples are padded to 20."""
    return [
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_yaml}",
        f"data.train_files={tmp / 'train.parquet'}", f"data.val_files={tmp / 'val.parquet'}",
        "data.train_batch_size=3", "data.max_prompt_length=1024", "data.max_response_length=24",
        "data.dataloader_num_workers=0",
        f"algorithm.adv_estimator={estimator}",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",     # no flash-attn on a CPU
        "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=naive",
        "actor_rollout_ref.rollout.val_kwargs.n=1",
        "trainer.device=cpu", "trainer.n_gpus_per_node=1", "trainer.nnodes=1",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false", "trainer.test_freq=2", "trainer.save_freq=-1",
        f"trainer.default_local_dir={tmp / 'ckpt'}", "trainer.logger=[console]",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1", "reward.num_workers=1",
        # logical slots: verl's TransferQueue actors and placement bundles hold CPUs while idle; every
        # process runs one torch thread on this machine's cores. One logical GPU: the actor's bundle.
        "+ray_kwargs.ray_init.num_cpus=8", "+ray_kwargs.ray_init.num_gpus=1",
        "+ray_kwargs.ray_init.include_dashboard=false",
    ]


def metrics_of(log: str) -> dict[int, dict[str, float]]:
    """verl's console logger lines ('step:N - key:value - ...') by step."""
    out: dict[int, dict[str, float]] = {}
    for line in log.splitlines():
        m = re.search(r"step:(\d+) - (.*)", line)
        if not m:
            continue
        values = {}
        for part in m.group(2).split(" - "):
            key, _, val = part.partition(":")
            val = re.sub(r"^np\.\w+\((.*)\)$", r"\1", val.strip())      # numpy scalars print as np.float64(x)
            try:
                values[key.strip()] = float(val)
            except ValueError:
                pass
        out.setdefault(int(m.group(1)), {}).update(values)
    return out


def warm_started_tiny(rows, out: Path) -> Path:
    """The tiny model after a short SFT on the expert's steps of the rows' tasks (with the agent loop's
    prompts): it then answers in format some of the time, so the step rewards and validity differ and the
    estimator's advantages (and the policy loss) are not all zero."""
    import torch
    from agents.envs import get_env_spec
    from agents.models import load_policy
    from agents.prompts import PromptSettings, make_prompter
    from agents.sft import expert_examples, sft
    from agents.verl_bridge.agent_loop import _make_env, task_of
    model, tok = load_policy("tiny")
    tasks = [task_of({"extra_info": r["extra_info"]}) for r in rows]
    spec = get_env_spec("textcraft")
    prompter = make_prompter("textcraft", PromptSettings(**SETTINGS))
    examples = expert_examples(spec, lambda: _make_env(spec.gym_id, tasks[0]["env_kwargs"]),
                               [t["task_id"] for t in tasks], prompter, tok, max_steps=3)
    torch.manual_seed(0)
    sft(model, tok, examples, steps=80, lr=3e-3, batch=6, log=None)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def run_main(tmp_path: Path, *overrides: str, estimator: str = "bipace", steps: int = 2) -> str:
    """``python -m agents.verl_bridge.main`` on the example config, CPU-sized (3 TextCraft tasks to train on,
    a fourth to validate on, the warm-started tiny policy); verl's console log."""
    env_kwargs = {"depths": [1], "max_steps": 3}
    rows = split_rows("textcraft", env_kwargs, "train", 4)     # TextCraft's test split has no depth-1 goal
    write(rows[:3], str(tmp_path / "train.parquet"))
    write(rows[3:], str(tmp_path / "val.parquet"))
    model = warm_started_tiny(rows, tmp_path / "policy")
    loop_yaml = tmp_path / "agent_loop.yaml"
    loop_yaml.write_text(LOOP_YAML)
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "agents.verl_bridge.cpu_backend",
           "VERL_PLATFORM": "cpu",
           # verl's engine registry keys FSDP on device names; its own override picks FSDP for ours
           "VERL_ENGINE_DEVICE": "cuda", "VERL_ENGINE_VENDOR": "nvidia",
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "0",
           "BIPACE_VERL_CHECK_ONLY": "0"}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "agents.verl_bridge.main", "--config-path", str(REPO / "examples" / "verl"),
           "--config-name", "alfworld_qwen1.5b",
           *cpu_overrides(tmp_path, str(model), str(loop_yaml), estimator, steps), *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    log = proc.stdout + proc.stderr
    (tmp_path / "run.log").write_text(log)
    assert proc.returncode == 0, log[-6000:]
    return log


def test_two_steps_and_a_validation_through_verls_entry_point(tmp_path):
    log = run_main(tmp_path)
    steps = metrics_of(log)
    assert {1, 2} <= set(steps), log[-4000:]
    for s in (1, 2):
        m = steps[s]
        # the estimator got the hidden states tapped in verl's old-log-prob forward: (real rows, hidden)
        assert m["bipace/embedding_rows"] > 0 and m["bipace/embedding_dim"] == 128      # the tiny model's
        assert m["bipace/embedding_abs_mean"] > 0
        assert (m["bipace/embedding_rows"] + m["bipace/padding_samples"]) % 4 == 0     # padded to mini-batch
    losses = {s: steps[s]["actor/pg_loss"] for s in (1, 2)}
    assert any(loss != 0.0 for loss in losses.values()), losses
    # validation after the last step: verl's _validate played the held-out task through the agent loop
    val = {k: v for k, v in steps[2].items() if k.startswith("val-")}
    assert "val-core/bipace/textcraft/reward/mean@1" in val, log[-4000:]
    assert val["val-aux/bipace/textcraft/episode_length/mean@1"] >= 1
    summary = {s: {"embedding": (steps[s]["bipace/embedding_rows"], steps[s]["bipace/embedding_dim"]),
                   "pg_loss": steps[s]["actor/pg_loss"], "padding": steps[s]["bipace/padding_samples"],
                   "step_s": steps[s].get("timing_s/step")} for s in (1, 2)}
    print("e2e summary:", json.dumps({"steps": summary, "validation": val}))


def test_hcapo_runs_the_hindsight_pass_through_the_actor_in_verls_advantage_step(tmp_path):
    # every row scored (score_failures): the depth-1 tasks are not always won by the tiny policy, and a
    # failed row's sum under the failure block goes through the same worker call as a won row's. The actor
    # runs in float32 here, so its sums can be checked against a direct forward of the same weights.
    audit = tmp_path / "hindsight"
    log = run_main(tmp_path, "+bipace.hindsight={score_failures: true, include_future_actions: true, "
                   f"save_dir: '{audit}'}}",
                   "+actor_rollout_ref.actor.fsdp_config.mixed_precision="
                   "{param_dtype: fp32, reduce_dtype: fp32, buffer_dtype: fp32}",
                   estimator="hcapo", steps=1)
    m = metrics_of(log)[1]
    real = m["bipace/hindsight_rows"]
    assert real > 0 and m["bipace/hindsight_tokens"] > 0
    assert m["bipace/hindsight_finite_rows"] == real        # every scored row has a finite sum
    assert (real + m["bipace/padding_samples"]) % 4 == 0    # all real samples scored: no padding copy
    assert m["bipace/hindsight_sum_mean"] < 0               # summed log-probs of real tokens
    assert "actor/pg_loss" in m
    # what verl's actor scored, against our own teacher-forced forward of the same (pre-update) weights on
    # the same x~ and y at the rollout temperature (1.0): the numbers HCAPO reads are the model's
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agents.ppo import response_logprobs
    saved = [json.loads(line) for line in (audit / "hindsight.jsonl").read_text().splitlines()]
    assert len(saved) == real
    tok = AutoTokenizer.from_pretrained(tmp_path / "policy")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "policy", dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    texts = [tok.decode(r["prompt_ids"]) for r in saved]
    assert any("Then: " in t for t in texts)                # include_future_actions: later actions listed
    with torch.no_grad():
        logp, _, mask = response_logprobs(model, [torch.tensor(r["prompt_ids"]) for r in saved],
                                          [torch.tensor(r["response_ids"]) for r in saved], tok.pad_token_id,
                                          1.0, with_entropy=False)
    direct = (logp.double() * mask).sum(-1).numpy()
    got = np.array([r["hind_logp_sum"] for r in saved])
    np.testing.assert_allclose(got, direct, rtol=1e-4, atol=1e-4)
    print("hindsight summary:", json.dumps({k: v for k, v in m.items() if "hindsight" in k}),
          "max |verl - direct|:", float(np.abs(got - direct).max()))
