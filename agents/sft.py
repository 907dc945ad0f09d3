"""Imitation warm start: render expert trajectories with the RL prompts and fine-tune the policy on them.

    examples = expert_examples(spec, make_env, tasks, prompter, tokenizer, max_steps=30)
    losses = sft(model, tokenizer, examples, steps=300, lr=1e-3, batch=16, seed=0)

The expert is the env's own (``EnvSpec.expert``: TextCraft's shortest crafting plan, WebShop's oracle,
ALFWorld's handcoded expert with its Fast Downward fallback), re-planned at every step. Each
step becomes one (chat prompt, ``<action>a</action><|im_end|>``) example, the exact text the RL policy
sees and writes. ``run_sft`` (used by ``bipace-train --sft-steps N``) trains all weights of the tiny
model (or a LoRA adapter it then merges, for hub models) and saves a ready-to-load model folder.
Options: ``--sft-passes`` > 1 adds episodes with random detours the expert recovers from
(``--sft-explore``); ``--sft-rename`` renames TextCraft items consistently (``agents.augment``).
"""
from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from agents.crash_points import crash_point
from agents.ppo import response_logits, response_logprobs
from agents.prefix import hashable_key


@dataclass(frozen=True)
class SftExample:
    """One expert step as text: the chat-rendered prompt (ending with the assistant header) and the
    answer followed by the end-of-turn token; ``key`` names the task (its prompts share a prefix)."""
    prompt: str
    response: str
    key: object = None


def expert_examples(spec, make_env, tasks, prompter, tokenizer, max_steps: int, seed: int = 0,
                    explore: float = 0.0) -> list[SftExample]:
    """One expert episode per task. With ``explore`` > 0 each step is, with that probability, a random
    admissible action instead (not an example); the expert then re-plans from the state it left, so the
    data also shows how to recover from a wrong ``get`` or an unplanned craft (DAgger-style coverage)."""
    if not 0.0 <= explore < 1.0:
        raise ValueError(f"explore must be in [0, 1), got {explore}")
    env = make_env()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eos_text = tokenizer.convert_ids_to_tokens(tokenizer.eos_token_id if eos is None or eos < 0 else eos)
    rng = np.random.default_rng(seed)
    out, won = [], 0
    for k, task in enumerate(tasks):
        obs, info = env.reset(seed=seed + k, options={"task_id": task, **spec.expert_reset_options})
        prompter.reset(0, obs, info)
        for _ in range(max_steps):
            plan = spec.expert(env)
            if not plan:
                break
            options = [a for a in prompter.shown_actions(info) or () if a != plan[0]]
            if explore and options and rng.random() < explore:
                action = options[rng.integers(len(options))]
            else:
                action = plan[0]
                text = tokenizer.apply_chat_template(prompter.messages(0, obs, info), tokenize=False,
                                                     add_generation_prompt=True)
                out.append(SftExample(text, prompter.expert_response(action) + eos_text, hashable_key(task)))
            prompter.record(0, obs, action)
            obs, _, term, trunc, info = env.step(action)
            if term or trunc:
                won += bool(info.get("won", False))
                break
    env.close()
    if not out:
        raise ValueError("the expert produced no steps; check the env's expert_actions() and the task ids")
    if won < len(tasks) and not explore:
        print(f"note: the expert won {won}/{len(tasks)} episodes within {max_steps} steps")
    return out


@torch.no_grad()
def step_accuracy(model, tokenizer, examples: list[SftExample], batch: int = 32) -> float:
    """Share of ``examples`` whose whole answer is the model's argmax continuation, token by token with
    the expert's earlier tokens fed in (teacher forcing): a rollout-free read of how often the policy
    would take the expert's next action."""
    if not examples:
        raise ValueError("step_accuracy needs at least one example")
    was_training = model.training
    model.eval()
    right = 0
    for k in range(0, len(examples), batch):
        chunk = examples[k:k + batch]
        logits, targets, rmask = response_logits(model, [_ids(tokenizer, e.prompt) for e in chunk],
                                                 [_ids(tokenizer, e.response) for e in chunk],
                                                 tokenizer.pad_token_id)
        right += int(((logits.argmax(-1) == targets) | (rmask == 0)).all(-1).sum())
    model.train(was_training)
    return right / len(examples)


def _ids(tokenizer, text: str) -> torch.Tensor:
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])


class SftCheckpoint:
    """An SFT run's resumable state in one folder (``state.pt``): the step, the trainable parameters (a
    LoRA adapter, or every weight in full mode), optimizer and schedule, the numpy and torch RNG states,
    the epoch's remaining batches and the losses so far. Written to a temporary file and renamed, so a
    process stopped mid-write keeps the previous one."""

    def __init__(self, folder: Path, every: int, setting: dict):
        if every < 0:
            raise ValueError(f"sft_checkpoint_every is a number of SFT steps (0 = never), got {every}")
        self.folder, self.every, self.setting = folder, every, setting

    def exists(self) -> bool:
        return (self.folder / "state.pt").exists()

    def due(self, done: int, steps: int) -> bool:
        return self.every > 0 and done % self.every == 0 and done < steps

    def save(self, done: int, model, opt, sched, rng, queue: list, losses: list) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        weights = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        state = {"step": done, "setting": self.setting, "weights": weights, "optimizer": opt.state_dict(),
                 "schedule": sched.state_dict(), "numpy": rng.bit_generator.state,
                 "torch": torch.get_rng_state(), "queue": [np.asarray(b).tolist() for b in queue],
                 "losses": list(losses)}
        tmp = self.folder / "state.pt.tmp"
        torch.save(state, tmp)
        tmp.replace(self.folder / "state.pt")

    def load(self, model, opt, sched, rng) -> tuple[int, list, list]:
        """Restore the saved state into ``model``, ``opt``, ``sched`` and ``rng``; returns (steps done,
        the remaining batches, the losses so far)."""
        state = torch.load(self.folder / "state.pt", weights_only=False)
        params = dict(model.named_parameters())
        trainable = {n for n, p in params.items() if p.requires_grad}
        if state.get("setting") != self.setting or set(state["weights"]) != trainable:
            raise ValueError(f"{self.folder} holds the checkpoint of another SFT run (saved with "
                             f"{state.get('setting')}, this one is {self.setting}, or other trainable "
                             "weights); delete that folder to start the warm start again")
        with torch.no_grad():
            for name, value in state["weights"].items():
                params[name].copy_(value)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["schedule"])
        rng.bit_generator.state = state["numpy"]
        torch.set_rng_state(state["torch"])
        return state["step"], [np.asarray(b) for b in state["queue"]], list(state["losses"])


def sft_batches(examples: list[SftExample], batch: int, share_prefix: bool) -> list[np.ndarray]:
    """The SFT's batches, as example indices. Length-bucketed: neighbours in length order, so a batch pads
    to about its own length (prompts with long admissible lists would otherwise set the cost of every
    batch); with ``share_prefix`` a task's steps side by side (then by length), so a batch shares few
    prefixes."""
    order = np.argsort([len(e.prompt) + len(e.response) for e in examples], kind="stable")
    if share_prefix:
        order = order[np.argsort([str(examples[i].key) for i in order], kind="stable")]
    return [order[i:i + batch] for i in range(0, len(order), batch)]


def batch_keys(drawn: list[SftExample]) -> list:
    """The sharing keys of a batch (task and episode alike: a task's expert steps repeat its history); a
    row without a task shares with no other."""
    return [e.key if e.key is not None else ("row", k) for k, e in enumerate(drawn)]


def batch_loss(model, tokenizer, drawn: list[SftExample], share_prefix: bool) -> torch.Tensor:
    """Token-mean cross-entropy of the responses of ``drawn``; with ``share_prefix`` a task's common prompt
    prefix and an episode's shared history run once (``agents.prefix``; the same loss)."""
    keys = batch_keys(drawn) if share_prefix else None
    logp, _, mask = response_logprobs(model, [_ids(tokenizer, e.prompt) for e in drawn],
                                      [_ids(tokenizer, e.response) for e in drawn],
                                      tokenizer.pad_token_id, with_entropy=False, keys=keys,
                                      episodes=keys)     # a task's expert steps repeat its history
    return -(logp * mask).sum() / mask.sum()


def sft(model, tokenizer, examples: list[SftExample], steps: int, lr: float, batch: int, seed: int = 0,
        augment=None, augment_prob: float = 0.0, log=print, probes: dict | None = None,
        share_prefix: bool = False, progress: bool = False, checkpoint_dir: Path | None = None,
        checkpoint_every: int = 0) -> list[float]:
    """Token-mean cross-entropy on the responses; AdamW with warm-up and cosine decay; ``steps`` optimizer
    steps of about ``batch`` examples each (epochs over length buckets in random order). ``augment(rng,
    prompt, response)`` rewrites an example with probability ``augment_prob`` each time it is drawn.
    ``probes`` ({name: examples}) adds each set's ``step_accuracy`` to the ten progress lines. With
    ``share_prefix`` a batch holds neighbouring steps of few tasks, whose common prompt prefix and shared
    history run once (``agents.prefix``): the same loss for far fewer tokens when prompts are mostly task
    text. With ``checkpoint_dir`` the trainable weights, optimizer, schedule, RNGs and batch queue are saved
    there every ``checkpoint_every`` steps, and a call that finds a checkpoint continues from it: a warm
    start a stopped session cut short ends with the weights an uninterrupted one would have."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    warm = max(1, steps // 20)     # linear warm-up, then cosine decay to 10% of lr
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm
        else 0.1 + 0.45 * (1 + np.cos(np.pi * (s - warm) / max(1, steps - warm))))
    rng = np.random.default_rng(seed)
    buckets = sft_batches(examples, batch, share_prefix)
    queue: list = []
    model.train()
    losses, t0, first = [], time.perf_counter(), 0
    saver = None
    if checkpoint_dir is not None:   # what must match for a saved state to continue this run
        digest = hashlib.sha256("\0".join(e.prompt + "\0" + e.response for e in examples).encode())
        setting = {"steps": steps, "lr": lr, "batch": batch, "seed": seed, "augment_prob": augment_prob,
                   "share_prefix": share_prefix,
                   "examples": f"{len(examples)}, sha256 {digest.hexdigest()[:16]}"}
        saver = SftCheckpoint(Path(checkpoint_dir), checkpoint_every, setting)
    if saver is not None and saver.exists():
        first, queue, losses = saver.load(model, opt, sched, rng)
        if log:
            log(f"sft: continuing from the checkpoint of step {first}/{steps} in {checkpoint_dir}")
    from tqdm.auto import tqdm
    bar = tqdm(total=steps, initial=first, desc="warm start (SFT)", unit="step", disable=not progress,
               leave=False)
    for step in range(first, steps):
        if not queue:
            queue = [buckets[k] for k in rng.permutation(len(buckets))]
        drawn = [examples[i] for i in queue.pop()]
        if augment is not None and augment_prob > 0:
            drawn = [SftExample(*augment(rng, e.prompt, e.response), e.key)
                     if rng.random() < augment_prob else e
                     for e in drawn]
        loss = batch_loss(model, tokenizer, drawn, share_prefix)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        crash_point("sft_step")
        losses.append(loss.item())
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
        if log and (step + 1) % max(1, steps // 10) == 0:
            acc = "".join(f" | step accuracy {name} {step_accuracy(model, tokenizer, probe):.3f}"
                          for name, probe in (probes or {}).items())
            log(f"sft step {step + 1}/{steps} loss {np.mean(losses[-max(1, steps // 10):]):.4f} "
                f"({time.perf_counter() - t0:.0f}s){acc}")
        if saver is not None and saver.due(step + 1, steps):
            saver.save(step + 1, model, opt, sched, rng, queue, losses)
    bar.close()
    model.eval()
    return losses


def run_sft(cfg, spec, make_env, tasks, path: Path, prompt_settings, held_out=(), make_eval_env=None) -> Path:
    """Warm start used by the trainer: expert data from the train tasks, SFT, save a model folder.
    ``held_out`` task ids are kept out of the names that ``cfg.sft_rename`` draws from; with
    ``cfg.sft_probe`` the expert's steps on the first of them (played in ``make_eval_env``, for envs
    that fix the split at construction) are scored as the SFT goes."""
    from agents.models import LoraSettings, add_lora, load_policy
    from agents.prompts import make_prompter
    checkpoints = path.with_name(path.name + ".sft_checkpoint")   # a stopped warm start continues from it
    torch.manual_seed(cfg.seed)
    model, tok = load_policy(cfg.model, cfg.dtype, cfg.device, cfg.gradient_checkpointing)
    tasks = list(tasks)
    if cfg.sft_episodes:
        tasks = [tasks[i] for i in np.random.default_rng(cfg.seed).permutation(len(tasks))[:cfg.sft_episodes]]
    augment = None
    if cfg.sft_rename > 0:
        from agents.augment import make_augmenter
        augment = make_augmenter(cfg.env, exclude=[str(t) for t in held_out])
    if cfg.sft_passes < 1:
        raise ValueError(f"sft_passes must be >= 1, got {cfg.sft_passes}")
    if cfg.sft_probe < 0:
        raise ValueError(f"sft_probe is a number of held-out tasks (0 = off), got {cfg.sft_probe}")
    if not 0.0 <= cfg.sft_explore < 1.0 or not 0.0 <= cfg.sft_rename <= 1.0:
        raise ValueError(f"sft_explore must be in [0, 1) and sft_rename in [0, 1]; got {cfg.sft_explore}, "
                         f"{cfg.sft_rename}")
    prompter = make_prompter(cfg.env, prompt_settings)
    examples = []
    for p in range(cfg.sft_passes):   # a pass = one episode per task; passes differ only by exploration
        examples += expert_examples(spec, make_env, tasks, prompter, tok, cfg.max_steps or spec.max_steps,
                                    seed=cfg.seed + p * len(tasks), explore=cfg.sft_explore if p else 0.0)
        if p == 0:
            plain = list(examples)    # detour-free steps, the train probe's source
    print(f"warm start: {len(examples)} expert steps from {cfg.sft_passes} x {len(tasks)} episodes")
    probes = {}
    if cfg.sft_probe > 0:
        held_out = list(held_out)[:cfg.sft_probe]
        if not held_out:
            raise ValueError("sft_probe needs held-out tasks (the eval split is empty)")
        probes["held-out"] = expert_examples(spec, make_eval_env or make_env, held_out, prompter, tok,
                                             cfg.max_steps or spec.max_steps, seed=cfg.seed)
        # the train probe: as many steps as the held-out one, from the detour-free training episodes
        pick = np.random.default_rng(cfg.seed).permutation(len(plain))[:len(probes["held-out"])]
        probes["train"] = [plain[i] for i in sorted(pick)]
    mode = cfg.sft_mode if cfg.sft_mode != "auto" else (cfg.preset().sft_mode if cfg.preset() else "lora")
    if mode not in ("full", "lora"):
        raise ValueError(f"sft_mode must be full | lora | auto, got {cfg.sft_mode!r}")
    if mode == "lora":
        model = add_lora(model, LoraSettings(rank=cfg.lora_rank, alpha=cfg.lora_alpha, mlp=cfg.lora_mlp,
                                             top_layers=cfg.lora_layers))
    sft(model, tok, examples, cfg.sft_steps, cfg.sft_lr, cfg.sft_batch, cfg.seed, augment=augment,
        augment_prob=cfg.sft_rename, probes=probes,
        share_prefix=cfg.share_prefix and not cfg.gradient_checkpointing,
        progress=cfg.progress, checkpoint_dir=checkpoints, checkpoint_every=cfg.sft_checkpoint_every)
    if mode == "lora":
        model = model.merge_and_unload()
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)       # a save a killed run left half-written
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    crash_point("warm_start_save")
    tmp.rename(path)
    shutil.rmtree(checkpoints, ignore_errors=True)     # the finished warm start replaces them
    return path
