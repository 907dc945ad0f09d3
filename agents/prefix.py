"""Shared-prefix forwards: rows whose prompts start with the same tokens run those tokens once.

The G rollouts of a task see the same system prompt, goal and recipe list at every step, and that
prefix is most of a small model's prompt (about 200 of 250 tokens on TextCraft). Here each key's
(task's) longest common token prefix is run once, its KV cache is indexed out to the key's rows, and
only each row's own suffix (history, observation) and response go through the model per row.

    split = split_prompts(prompt_ids, keys, pad_id)          # keys: one hashable per row (task id)
    cache = prefill(model, split)                            # (rows, Lp) KV cache, expanded per row
    ids, mask = split.full()
    out = model.generate(input_ids=ids, attention_mask=mask, **{cache_kwarg(model): cache})

``response_inputs`` builds the teacher-forced twin used by PPO and SFT (``agents.ppo``); gradients flow
through the prefix's cache into the adapter, so it equals the plain forward (tests/agents/test_prefix.py).
Given episode ids it also runs each episode's history once (``SpineSplit``): a step's prompt repeats the
previous step's, so every row then runs only its instruction tail and response. Position ids follow
``generate``'s rule (cumulative sum of the attention mask), so padding before the prefix and between
prefix and suffix changes nothing.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch


def cache_kwarg(model) -> str:
    """Name of the KV-cache argument of ``model``'s forward (transformers renamed past_key_values)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def output_cache(out):
    return getattr(out, "cache", None) if getattr(out, "cache", None) is not None else out.past_key_values


def hashable_key(task):
    """A task id usable as a grouping key (dict-like ids become their repr)."""
    try:
        hash(task)
        return task
    except TypeError:
        return repr(task)


def common_prefix_len(seqs: list[torch.Tensor]) -> int:
    """Length of the longest token prefix shared by every sequence."""
    n = min(len(s) for s in seqs)
    if len(seqs) == 1 or n == 0:
        return n
    stack = torch.stack([s[:n] for s in seqs])
    same = (stack == stack[:1]).all(0)
    diff = torch.nonzero(~same)
    return int(diff[0]) if len(diff) else n


def left_pad(seqs: list[torch.Tensor], pad_id: int, width: int | None = None):
    width = max([len(s) for s in seqs] + [0]) if width is None else width
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        if len(s):
            ids[r, width - len(s):] = s
            mask[r, width - len(s):] = 1
    return ids, mask


@dataclass
class PromptSplit:
    """Prompts cut into one prefix per key (left-padded, (U, Lp)) and one suffix per row."""
    prefix_ids: torch.Tensor
    prefix_mask: torch.Tensor
    row_prefix: torch.Tensor            # (N,) which prefix each row continues
    suffixes: list[torch.Tensor]        # each row's tokens after its prefix (at least one)
    pad_id: int

    def full(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, Lp + Ls) ids and attention mask: prefix columns then left-padded suffix columns, the layout
        ``generate`` gets."""
        ids, mask = left_pad(self.suffixes, self.pad_id)
        return (torch.cat([self.prefix_ids[self.row_prefix], ids], 1),
                torch.cat([self.prefix_mask[self.row_prefix], mask], 1))


def split_prompts(prompt_ids: list[torch.Tensor], keys: list, pad_id: int) -> PromptSplit:
    """Group rows by key and cut each group's prompts after their common prefix. Every row keeps at
    least its last prompt token as suffix (``generate`` needs one uncached token per row)."""
    if len(keys) != len(prompt_ids):
        raise ValueError(f"need one key per prompt; got {len(keys)} keys for {len(prompt_ids)} prompts")
    order: dict = {}
    for r, k in enumerate(keys):
        order.setdefault(k, []).append(r)
    row_prefix = torch.empty(len(prompt_ids), dtype=torch.long)
    prefixes, suffixes = [], [None] * len(prompt_ids)
    for u, rows in enumerate(order.values()):
        seqs = [prompt_ids[r] for r in rows]
        cut = min(common_prefix_len(seqs), min(len(s) for s in seqs) - 1)
        prefixes.append(seqs[0][:max(cut, 0)])
        for r in rows:
            row_prefix[r] = u
            suffixes[r] = prompt_ids[r][max(cut, 0):]
    ids, mask = left_pad(prefixes, pad_id)
    return PromptSplit(ids, mask, row_prefix, suffixes, pad_id)


def positions(mask: torch.Tensor) -> torch.Tensor:
    """``generate``'s position ids for a (possibly gapped) attention mask."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def prefill(model, split: PromptSplit):
    """Run each distinct prefix once and return its KV cache indexed out to every row (N, Lp). Runs under
    the caller's grad mode: with grad on, the cache carries gradients back to the prefix."""
    dev = next(model.parameters()).device
    ids, mask = split.prefix_ids.to(dev), split.prefix_mask.to(dev)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True,
                logits_to_keep=1)
    cache = output_cache(out)
    cache.batch_select_indices(split.row_prefix.to(dev))
    return cache


def gatherable(cache) -> bool:
    """Whether ``gather_columns`` can index ``cache``: plain growing layers only (sliding-window, static and
    quantised layers place their columns themselves)."""
    from transformers.cache_utils import DynamicLayer
    return all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None]))


def gather_columns(cache, index: torch.Tensor) -> None:
    """Keep in row r of every layer of a ``DynamicCache`` only the columns ``index[r]`` names, in that order:
    (N, K) column indices (N = the cache's rows). Keys already carry their rotary positions, so a kept
    column means what it meant where it was; columns given only to pad a row are masked by the caller."""
    if not gatherable(cache):
        raise TypeError(f"can only gather columns of DynamicLayer caches, got "
                        f"{sorted({type(x).__name__ for x in getattr(cache, 'layers', [cache])})}")
    for layer in cache.layers:
        if layer.get_seq_length() == 0:
            continue
        n, heads, _, dim = layer.keys.shape
        where = index.to(layer.keys.device)[:, None, :, None].expand(n, heads, index.shape[1], dim)
        layer.keys, layer.values = layer.keys.gather(2, where), layer.values.gather(2, where)


@dataclass
class SpineSplit:
    """A ``PromptSplit`` whose rows are cut once more, after the part of their episode's *spine* they share.

    An episode's later prompts repeat its earlier ones and add lines (compact prompts append one
    "action -> result" line per step before a fixed instruction tail), so the episode's longest prompt,
    its spine, holds most of every other row's prompt. The spine (after the task prefix) runs once per
    episode; row r attends to the first ``row_spine_len[r]`` spine tokens and runs only the rest of its
    prompt.
    """
    prompts: PromptSplit                # task prefixes (one per key); its suffixes are not used here
    spine_prefix: torch.Tensor          # (S,) the task prefix each spine continues
    spine_ids: torch.Tensor             # (S, Ls) spines after their task prefix, right-padded
    row_spine_index: torch.Tensor       # (N,) which spine each row belongs to
    row_spine_len: torch.Tensor         # (N,) spine tokens each row attends to
    suffixes: list[torch.Tensor]        # each row's prompt tokens after prefix and shared spine

    def row_spine_mask(self) -> torch.Tensor:
        """(N, Ls): 1 on the spine columns each row attends to."""
        return (torch.arange(self.spine_ids.shape[1])[None, :] < self.row_spine_len[:, None]).long()


def split_spines(split: PromptSplit, episodes: list) -> SpineSplit | None:
    """Cut ``split``'s suffixes after the part each row shares with its episode's longest suffix. Any
    grouping is correct (each row's shared length is measured on its tokens), a truer one only saves more.
    Returns None when the spines would not cut the padded token count of the forward."""
    if len(episodes) != len(split.suffixes):
        raise ValueError(f"need one episode id per row; got {len(episodes)} for {len(split.suffixes)} rows")
    groups: dict = {}
    for r, e in enumerate(episodes):
        groups.setdefault((int(split.row_prefix[r]), e), []).append(r)
    spines, spine_prefix = [], []
    row_index = torch.empty(len(episodes), dtype=torch.long)
    row_len = torch.zeros(len(episodes), dtype=torch.long)
    suffixes = list(split.suffixes)
    for g, ((u, _), rows) in enumerate(groups.items()):
        spine = max((split.suffixes[r] for r in rows), key=len)
        spines.append(spine)
        spine_prefix.append(u)
        for r in rows:
            s = split.suffixes[r]
            shared = min(common_prefix_len([s, spine]), len(s) - 1)    # keep one token to predict from
            row_index[r], row_len[r], suffixes[r] = g, shared, s[shared:]
        spines[g] = spine[:int(row_len[rows].max())]     # spine tokens no row attends to need not run
    width = max(len(s) for s in spines)
    n = len(suffixes)
    if len(spines) * width + n * max(len(s) for s in suffixes) >= n * max(len(s) for s in split.suffixes):
        return None
    spine_ids = torch.full((len(spines), width), split.pad_id, dtype=torch.long)
    for g, s in enumerate(spines):
        spine_ids[g, :len(s)] = s
    return SpineSplit(split, torch.tensor(spine_prefix, dtype=torch.long), spine_ids, row_index, row_len,
                      suffixes)


def _spine_cache(model, spines: SpineSplit):
    """KV cache of every row's task prefix followed by its episode's spine: (N, Lp + Ls)."""
    dev = next(model.parameters()).device
    split = spines.prompts
    cache = prefill(model, PromptSplit(split.prefix_ids, split.prefix_mask, spines.spine_prefix, [],
                                       split.pad_id))
    ids = spines.spine_ids.to(dev)
    # the right padding is attended as if real: only later padding sees it, and no row's mask keeps it
    full = torch.cat([split.prefix_mask[spines.spine_prefix].to(dev), torch.ones_like(ids)], 1)
    out = model(input_ids=ids, attention_mask=full, position_ids=positions(full)[:, -ids.shape[1]:],
                use_cache=True, logits_to_keep=1, **{cache_kwarg(model): cache})
    cache = output_cache(out)
    cache.batch_select_indices(spines.row_spine_index.to(dev))
    return cache


def pad_batch(prompt_ids, response_ids, pad_id: int, device):
    """Left-pad prompts to P and right-pad responses to R (verl's layout), so the response always
    starts at column P. Returns input_ids, attention_mask, position_ids, response mask (B, R)."""
    B = len(prompt_ids)
    P = max(len(p) for p in prompt_ids)
    R = max(1, max(len(r) for r in response_ids))
    ids = torch.full((B, P + R), pad_id, dtype=torch.long)
    attn = torch.zeros((B, P + R), dtype=torch.long)
    for b, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        ids[b, P - len(p):P] = p
        ids[b, P:P + len(r)] = r
        attn[b, P - len(p):P + len(r)] = 1
    pos = (attn.cumsum(1) - 1).clamp(min=0)   # what generate() uses for left-padded prompts
    return ids.to(device), attn.to(device), pos.to(device), attn[:, P:].to(device).float()


# Sharing runs only where it cuts the token positions the forward runs by at least this fraction. Measured
# back to back on WebShop SFT batches (benchmarks/speed/sft_cost.py --paired): 40% fewer positions took
# 0.52x the plain time, 10-14% fewer 0.96-0.97x (within the noise), and a batch where one task's lone
# long prompt padded every task prefix ran 9-13% more positions in 1.3-1.7x the time.
MIN_TOKEN_SAVING = 0.1


def sharing_pays(shared_tokens: int, plain_tokens: int) -> bool:
    """Whether the shared layout runs ``MIN_TOKEN_SAVING`` fewer token positions than the plain one."""
    return shared_tokens <= (1 - MIN_TOKEN_SAVING) * plain_tokens


def _tokens(split: PromptSplit, spines: SpineSplit | None, rows: int, response_width: int) -> int:
    suffixes = split.suffixes if spines is None else spines.suffixes
    ran = split.prefix_ids.numel() + rows * (max(len(s) for s in suffixes) + response_width)
    return ran if spines is None else ran + spines.spine_ids.numel()


def _widths(prompt_ids, response_ids) -> tuple[int, int]:
    return len(prompt_ids), max(1, max(len(r) for r in response_ids))


def forward_tokens(prompt_ids, response_ids, pad_id: int, keys=None, episodes=None) -> int:
    """Token positions, padding included, that a forward in the layout these arguments ask for runs through
    the model: B x (P + R) plain; with ``keys`` one row per task prefix, then B x (suffix + R); with
    ``episodes`` too, one row per spine as well. ``response_inputs`` takes the shared layout only where it
    runs ``MIN_TOKEN_SAVING`` fewer positions than the plain one."""
    B, R = _widths(prompt_ids, response_ids)
    if keys is None:
        return B * (max(len(p) for p in prompt_ids) + R)
    split = split_prompts(prompt_ids, keys, pad_id)
    return _tokens(split, split_spines(split, episodes) if episodes is not None else None, B, R)


def _shared_layout(prompt_ids, response_ids, pad_id: int, keys, episodes):
    """(split, spines, positions) of the shared layout where ``sharing_pays``, else None."""
    split = split_prompts(prompt_ids, keys, pad_id)
    spines = split_spines(split, episodes) if episodes is not None else None
    shared = _tokens(split, spines, *_widths(prompt_ids, response_ids))
    if not sharing_pays(shared, forward_tokens(prompt_ids, response_ids, pad_id)):
        return None
    return split, spines, shared


def tokens_run(prompt_ids, response_ids, pad_id: int, keys=None, episodes=None) -> int:
    """The token positions ``response_inputs`` with these arguments runs: the shared layout's where sharing
    pays, else the plain one's."""
    shared = None if keys is None else _shared_layout(prompt_ids, response_ids, pad_id, keys, episodes)
    return forward_tokens(prompt_ids, response_ids, pad_id) if shared is None else shared[2]


@dataclass
class ResponseInputs:
    """One teacher-forced forward over prompts + responses, ready to run: ``forward`` are the model's
    keyword arguments (ids, mask, positions and, with a shared prefix, its cache); the last R + 1 output
    positions predict ``targets`` (B, R), the response tokens, where ``mask`` (B, R) is 1."""
    forward: dict
    targets: torch.Tensor
    mask: torch.Tensor


def response_inputs(model, prompt_ids, response_ids, pad_id: int, keys=None,
                    episodes=None) -> ResponseInputs:
    """The forward that scores each response given its prompt. With ``keys`` (one per row) rows with equal
    keys run their common prompt prefix once first, and with ``episodes`` too each episode's spine
    (``SpineSplit``); that prefix pass runs here, under the caller's grad mode, and its cache is in
    ``forward``. Where sharing would not cut the positions run by ``MIN_TOKEN_SAVING`` (rows of many tasks,
    one long prompt padding every prefix) the plain layout runs instead: the same numbers either way."""
    dev = next(model.parameters()).device
    shared = None if keys is None else _shared_layout(prompt_ids, response_ids, pad_id, keys, episodes)
    if shared is None:
        ids, attn, pos, rmask = pad_batch(prompt_ids, response_ids, pad_id, dev)
        R = rmask.shape[1]
        return ResponseInputs(dict(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False),
                              ids[:, -R:], rmask)
    split, spines, _ = shared
    if spines is None:
        cache, suffixes = prefill(model, split), split.suffixes
        cached_mask = split.prefix_mask[split.row_prefix]
    else:
        cache, suffixes = _spine_cache(model, spines), spines.suffixes
        cached_mask = torch.cat([split.prefix_mask[split.row_prefix], spines.row_spine_mask()], 1)
    ids, attn, _, rmask = pad_batch(suffixes, response_ids, pad_id, dev)
    full = torch.cat([cached_mask.to(dev), attn], 1)
    pos = positions(full)[:, full.shape[1] - ids.shape[1]:]
    R = rmask.shape[1]
    return ResponseInputs(dict(input_ids=ids, attention_mask=full, position_ids=pos, use_cache=True,
                               **{cache_kwarg(model): cache}), ids[:, -R:], rmask)
