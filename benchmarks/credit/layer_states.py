"""Every layer's prompt states for the rows of a leaderboard batch, and each row's replayed env state: the
input of ``hidden_sweep.py`` (BiPACE at the paper's setting, and every other layer, pooling and radius).

    python -m benchmarks.credit.layer_states runs/cells/textcraft-eps0.8 [runs/cells/webshop-eps0.5 ...]

Per row of the folder's ``batch.pkl`` (written by ``advantage_accuracy.py``), from one teacher-forced
forward of the prompt through the model that embedded the batch:

- ``last``: every decoder block's output at the prompt's last token, the vector BiGPO's ``HiddenCapture``
  records at one block (block outputs, before the final norm: hidden_states[1..L] in HF's convention,
  except that HF normalises its last one);
- ``mean``: every block's output averaged over the prompt's tokens;
- ``state``: the env state the row acted in, replayed from the episode's actions: its observation hash and
  the env's own state where it has one (TextCraft's inventory, WebShop's page, query, product and chosen
  options, ALFWorld's PDDL facts), the label of "same state" in the sweep's AUC.

Prompts of an episode mostly extend each other, so each forward runs only the tokens a prompt adds to the
previous one (its KV cache cropped back to the shared prefix, as ``scripted.embed_episodes``). The file
(``layer_states.npz``, float32, kept beside the batch, never committed: ~100 MB for a WebShop batch) records
the manifest it was made under; a rerun on a folder whose manifest changed is refused, an unchanged one
returns at once. The last block's ``last`` must reproduce the batch's own embedding: a check that the
prompts, the model and the layer convention are the ones the leaderboard scored.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

FILE = "layer_states.npz"
POOLINGS = ("last", "mean")


def manifest_digest(folder: Path) -> str:
    path = Path(folder) / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(f"{folder} has no manifest.json: not a batch folder of "
                                "advantage_accuracy.py (make one with `python -m "
                                "benchmarks.credit.advantage_accuracy --cell NAME --out DIR`)")
    return hashlib.sha1(json.dumps(json.loads(path.read_text()), sort_keys=True).encode()).hexdigest()


def check_layer_states(folder: Path, stored_digest: str) -> None:
    """Refuse layer states made under another manifest than the folder's present one."""
    now = manifest_digest(folder)
    if stored_digest != now:
        raise ValueError(f"{Path(folder) / FILE} was made under another manifest.json than the folder's "
                         f"present one ({stored_digest[:10]} vs {now[:10]}): its rows may not be the batch's."
                         " "
                         f"Delete it and rerun `python -m benchmarks.credit.layer_states {folder}`")


# ----------------------------------------------------------------------------------- replayed env state
def _textcraft_state(env) -> tuple:
    return tuple(sorted(env.unwrapped.inventory.items()))


def _webshop_state(env) -> tuple:
    s = env.unwrapped.session
    return (s.page_name, tuple(s.keywords or ()), s.asin, tuple(sorted(s.options.items())), s.sub,
            getattr(s, "page", None))


def _alfworld_state(env) -> tuple:
    return tuple(sorted(map(str, env.unwrapped._state["_facts"])))


ENV_STATE = {"textcraft": _textcraft_state, "webshop": _webshop_state, "alfworld": _alfworld_state}


def episode_rows(ro) -> list[np.ndarray]:
    """Each episode's rows in step order."""
    out = []
    for e in range(int(ro.env_index.max()) + 1):
        rows = np.flatnonzero(ro.env_index == e)
        out.append(rows[np.argsort(ro.batch.step_idx[rows], kind="stable")])
    return out


def replay_states(make_env, env_name: str, saved: dict) -> np.ndarray:
    """Per row, a dense code of (goal, observation hash, the env's own state) from replaying its episode's
    actions; each replayed observation must be the row's recorded anchor."""
    ro, b = saved["ro"], saved["ro"].batch
    own = ENV_STATE[env_name]
    keys = np.empty(len(b), dtype=object)
    env = make_env()
    try:
        for e, rows in enumerate(episode_rows(ro)):
            task, seed = saved["tasks"][e], int(saved["seeds"][e])
            obs, info = env.reset(seed=seed, options={"task_id": task})
            for r in rows:
                if info.get("anchor", obs) != b.anchor[r]:
                    raise RuntimeError(f"replaying episode {e} (task {task!r}, seed {seed}) reached another"
                                       f" observation than the batch recorded at step {b.step_idx[r]}: the"
                                       " env or its data changed since the batch was played; rerun the cell")
                keys[r] = (str(task), info["obs_hash"] if "obs_hash" in info else hash(obs), own(env))
                obs, _, _, _, info = env.step(ro.actions[r])
    finally:
        env.close()
    _, codes = np.unique(np.array([hashlib.sha1(repr(k).encode()).hexdigest() for k in keys]),
                         return_inverse=True)
    return codes.reshape(-1).astype(np.int64)


# ----------------------------------------------------------------------------------------- every layer
def embed_all_layers(model, episodes: list[list], progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(last, mean), each (rows, L, H) float32 in the order of the concatenated episodes: every block's
    output at the last prompt token and averaged over the prompt, one forward per new prompt suffix."""
    import torch
    from tqdm.auto import tqdm
    from agents.models import decoder_layers
    from agents.prefix import cache_kwarg, common_prefix_len, output_cache
    blocks = decoder_layers(model)
    grabbed: list = [None] * len(blocks)

    def hook_of(i):
        def hook(module, args, output):
            grabbed[i] = (output[0] if isinstance(output, tuple) else output)[0].detach().float()
        return hook

    handles = [blk.register_forward_hook(hook_of(i)) for i, blk in enumerate(blocks)]
    kwarg, dev = cache_kwarg(model), next(model.parameters()).device
    lasts, means, was_training = [], [], model.training
    model.eval()
    try:
        with torch.no_grad():
            for prompts in tqdm(episodes, desc="layer states", unit="episode", disable=not progress):
                longest = max((len(p) for p in prompts), default=0)
                tokens = None                   # (T, L, H): every block's output at every prompt token
                cache, prev = None, None
                for p in prompts:
                    shared = 0 if prev is None else min(common_prefix_len([p, prev]), len(p) - 1)
                    if cache is not None and cache.get_seq_length() > shared:
                        cache.crop(shared - cache.get_seq_length())
                    res = model(input_ids=p[shared:][None].to(dev), use_cache=True, **{kwarg: cache})
                    cache, prev = output_cache(res), p
                    new = torch.stack(grabbed, dim=1).cpu()                   # (T_new, L, H)
                    if tokens is None:
                        tokens = torch.empty((longest, len(blocks), new.shape[-1]), dtype=torch.float32)
                    tokens[shared:len(p)] = new
                    lasts.append(new[-1].numpy().copy())
                    means.append(tokens[:len(p)].mean(dim=0).numpy())
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return np.stack(lasts), np.stack(means)


def build(folder: Path, model_name: str | None = None, progress: bool = True) -> Path:
    """Write ``folder/layer_states.npz`` (see the module docstring); returns its path."""
    from agents.envs import get_env_spec, split_env_factory
    from agents.models import load_policy
    folder = Path(folder)
    digest = manifest_digest(folder)
    out = folder / FILE
    if out.exists():
        with np.load(out) as z:
            check_layer_states(folder, str(z["manifest"]))
        return out
    manifest = json.loads((folder / "manifest.json").read_text())
    policy = str(manifest.get("policy", ""))
    # a scripted batch was embedded by the preset's model; a policy-played one by the policy itself
    model_name = model_name or manifest.get("embed_model") or (policy if Path(policy).exists() else None)
    if not model_name:
        raise ValueError(f"{folder}: the policy that played and embedded this batch, {policy!r}, is not on "
                         "this machine; pass --model with that policy's folder")
    saved = pickle.loads((folder / "batch.pkl").read_bytes())
    ro = saved["ro"]
    from benchmarks.credit.aa_settings import cell_config
    cfg = cell_config(manifest)
    spec = get_env_spec(cfg.env)
    split = (manifest.get("splits") or [cfg.train_split])[0]
    t0 = time.perf_counter()
    make_env = split_env_factory(spec, cfg.env_kwargs_dict(), split, cfg.max_steps or spec.max_steps)
    state = replay_states(make_env, cfg.env, saved)
    replay_s = time.perf_counter() - t0
    lm, _ = load_policy(model_name)
    rows = episode_rows(ro)
    t1 = time.perf_counter()
    last, mean = embed_all_layers(lm, [[ro.prompt_ids[r] for r in rs] for rs in rows], progress)
    embed_s = time.perf_counter() - t1
    order = np.concatenate(rows)
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    last, mean = last[back], mean[back]                  # batch row order
    layer = cfg.resolved_hidden_layer()
    n_layers = last.shape[1]
    from agents.models import default_hidden_layer, layer_module_index
    block = layer_module_index(default_hidden_layer(n_layers) if layer is None else layer, n_layers)
    unit = last[:, block] / np.linalg.norm(last[:, block], axis=1, keepdims=True)
    gap = float(np.abs(unit - ro.batch.embedding).max())
    if gap > 2e-3:
        raise RuntimeError(f"block {block}'s last-token states differ from the batch's own embedding by up "
                           f"to {gap:.4f}: {model_name!r} is not the model (or layer) that embedded {folder}")
    np.savez(out, last=last.astype(np.float32), mean=mean.astype(np.float32), state=state,
             manifest=digest, model=model_name, batch_block=block, check_gap=gap,
             seconds=json.dumps({"replay_s": replay_s, "embed_s": embed_s}))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", type=Path, help="batch folders of advantage_accuracy.py")
    p.add_argument("--model", default=None,
                   help="the model that embedded the batch (default: the manifest's embed_model, or the "
                        "policy folder that played it)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    for folder in args.folders:
        t0 = time.perf_counter()
        path = build(folder, args.model, not args.no_progress)
        print(f"{path}: {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
