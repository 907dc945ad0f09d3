"""agents/prefix.py: running each task's common prompt prefix once gives the plain forward's numbers."""
import torch

from agents.models import LoraSettings, add_lora, load_policy
from agents.ppo import response_logits
from agents.prefix import (cache_kwarg, common_prefix_len, forward_tokens, prefill, response_inputs,
                           split_prompts, split_spines, tokens_run)


def _prompts(tok):
    head = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nGoal: craft stick.\n")
    texts = [head + "get 2 oak planks -> Got 2 oak planks<|im_end|>\n<|im_start|>assistant\n",
             head + "Step 1<|im_end|>\n<|im_start|>assistant\n",
             "<|im_start|>system\nOther<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
             head + "Step 1<|im_end|>\n<|im_start|>assistant\n"]
    answers = ["<action>craft 4 stick using 2 oak planks</action><|im_end|>",
               "<action>get</action><|im_end|>",
               "hello<|im_end|>", "x"]

    def ids(t):
        return torch.tensor(tok(t, add_special_tokens=False)["input_ids"])

    return [ids(t) for t in texts], [ids(a) for a in answers], ["stick", "stick", "other", "stick"]


def _adapted():
    model, tok = load_policy("tiny")          # its own copy: peft adapts the model in place
    torch.manual_seed(0)
    model = add_lora(model, LoraSettings(rank=4, alpha=8))
    for name, p in model.named_parameters():
        if "lora_B" in name:                  # a non-zero adapter, so the cache must carry it
            torch.nn.init.normal_(p, std=0.05)
    return model, tok


def test_split_cuts_after_each_keys_common_prefix_and_keeps_a_token_per_row():
    a, b = torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 3, 9, 9])
    assert common_prefix_len([a, b]) == 3 and common_prefix_len([a]) == 4
    split = split_prompts([a, b, a, torch.tensor([7])], ["x", "x", "y", "z"], pad_id=0)
    assert split.row_prefix.tolist() == [0, 0, 1, 2]
    assert [s.tolist() for s in split.suffixes] == [[4], [9, 9], [4], [7]]   # a lone row keeps its last token
    assert split.prefix_ids.tolist() == [[1, 2, 3], [1, 2, 3], [0, 0, 0]]
    assert split.prefix_mask.tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 0]]
    full, mask = split.full()
    assert [full[r][mask[r].bool()].tolist() for r in range(4)] == [a.tolist(), b.tolist(), a.tolist(), [7]]


def _episode_prompts(tok):
    """Compact-style prompts of three episodes (two of one task): each step appends an action line
    before the same instruction tail. Returns prompts, answers, task keys and episode ids."""
    head = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nGoal: craft stick.\ncraft 4 oak planks using 1 oak log\n")
    tail = "Answer with one action.<|im_end|>\n<|im_start|>assistant\n"
    lines = {0: ["get 1 oak log -> Got 1 oak log", "craft 4 oak planks using 1 oak log -> Crafted 4"],
             1: ["get 2 oak log -> Got 2 oak log", "inventory -> oak log (2)", "get 1 stick -> Nope"],
             2: ["look -> Nothing"]}
    prompts, keys, episodes = [], [], []
    for e, ls in lines.items():
        task = head if e < 2 else head.replace("stick", "torch")
        for t in range(len(ls) + 1):
            text = task + ("".join(x + "\n" for x in ls[:t]) if t else "Your observation: start.\n") + tail
            prompts.append(torch.tensor(tok(text, add_special_tokens=False)["input_ids"]))
            keys.append("torch" if e == 2 else "stick")
            episodes.append(e)
    answers = [torch.tensor(tok(f"<action>get {k} oak log</action><|im_end|>"[:20 + 3 * k],
                                add_special_tokens=False)["input_ids"]) for k in range(len(prompts))]
    return prompts, answers, keys, episodes


def test_episode_spines_cut_each_row_to_its_tail_and_keep_a_token():
    a, b, c = torch.tensor([1, 2, 5, 6]), torch.tensor([1, 2, 3, 5, 6]), torch.tensor([1, 2, 3, 4, 5, 6])
    split = split_prompts([a, b, c, c], ["x"] * 4, pad_id=0)
    assert split.prefix_ids.tolist() == [[1, 2]]
    spines = split_spines(split, [0, 0, 0, 1])
    assert spines.spine_ids.tolist() == [[3, 4, 5], [3, 4, 5]]    # the longest suffix, cut where no row reads
    assert spines.row_spine_len.tolist() == [0, 1, 3, 3]
    assert [s.tolist() for s in spines.suffixes] == [[5, 6], [5, 6], [6], [6]]
    # rows that share nothing past the task prefix: a spine would only add tokens
    assert split_spines(split_prompts([a, torch.tensor([1, 2, 9, 9])], ["x", "x"], 0), [0, 0]) is None


def test_forward_tokens_counts_what_each_layout_runs():
    t = torch.tensor
    prompts = [t([1, 2, 3, 4, 5]), t([1, 2, 3, 4, 6, 7]), t([9, 8])]
    answers = [t([1, 1]), t([1]), t([1, 1, 1])]
    assert forward_tokens(prompts, answers, 0) == 3 * (6 + 3)
    # prefixes [1 2 3 4] and [9] padded to (2, 4); suffixes [5], [6 7], [8]
    assert forward_tokens(prompts, answers, 0, keys=["a", "a", "b"]) == 2 * 4 + 3 * (2 + 3)
    # and task a's spine [6] (padded to (2, 1)): suffixes [5], [7], [8]
    keys = ["a", "a", "b"]
    assert forward_tokens(prompts, answers, 0, keys=keys, episodes=keys) == 8 + 2 + 3 * 4
    plain = response_inputs(torch.nn.Linear(1, 1), prompts, answers, 0)   # the plain layout needs no model
    assert plain.forward["input_ids"].numel() == forward_tokens(prompts, answers, 0)


def test_shared_logits_and_gradients_equal_the_plain_forward():
    model, tok = _adapted()
    prompts, answers, keys = _prompts(tok)
    with torch.no_grad():          # the shared layout really runs (it saves enough here)
        inp = response_inputs(model, prompts, answers, tok.pad_token_id, keys=keys)
    assert cache_kwarg(model) in inp.forward
    model.train()
    grads = []
    for k in (None, keys):
        model.zero_grad(set_to_none=True)
        logits, targets, mask = response_logits(model, prompts, answers, tok.pad_token_id, keys=k)
        logp = logits.float().log_softmax(-1).gather(-1, targets[..., None])[..., 0]
        (-(logp * mask).sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
        if k is None:
            plain = (logits * mask[..., None]).detach()
    assert torch.allclose(plain, (logits * mask[..., None]).detach(), atol=1e-4)
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.allclose(grads[0][n], grads[1][n], atol=1e-5, rtol=1e-3) for n in grads[0])
    assert any(g.abs().sum() > 0 for g in grads[0].values())


def test_sharing_runs_only_where_it_cuts_the_forward_by_min_token_saving(monkeypatch):
    model, tok = _adapted()
    pad = tok.pad_token_id
    prompts, answers, keys = _prompts(tok)
    with torch.no_grad():
        assert forward_tokens(prompts, answers, pad, keys=keys) < 0.9 * forward_tokens(prompts, answers, pad)
        assert cache_kwarg(model) in response_inputs(model, prompts, answers, pad, keys=keys).forward
        shared = forward_tokens(prompts, answers, pad, keys=keys)
        assert tokens_run(prompts, answers, pad, keys=keys) == shared
        # a lone row with the longest prompt makes every task prefix as long as its own: sharing costs more
        text = torch.tensor(tok(" ".join(f"w{i}" for i in range(80)), add_special_tokens=False)["input_ids"])
        rows = [text[:40], torch.cat([text[:2], text[10:40]]), torch.cat([text[:2], text[20:40]]), text[:60]]
        lone = ["a", "a", "a", "b"]
        assert forward_tokens(rows, answers, pad, keys=lone) > forward_tokens(rows, answers, pad)
        chosen = response_inputs(model, rows, answers, pad, keys=lone)
        assert cache_kwarg(model) not in chosen.forward and not chosen.forward["use_cache"]
        assert tokens_run(rows, answers, pad, keys=lone) == forward_tokens(rows, answers, pad)
        picked, targets, mask = response_logits(model, rows, answers, pad, keys=lone)
        monkeypatch.setattr("agents.prefix.MIN_TOKEN_SAVING", float("-inf"))
        assert cache_kwarg(model) in response_inputs(model, rows, answers, pad, keys=lone).forward
        forced, _, _ = response_logits(model, rows, answers, pad, keys=lone)
    m = mask.bool()
    assert torch.allclose(picked[m], forced[m], atol=1e-4)


def test_episode_spines_give_the_plain_forwards_logits_and_gradients():
    model, tok = _adapted()
    prompts, answers, keys, episodes = _episode_prompts(tok)
    assert split_spines(split_prompts(prompts, keys, tok.pad_token_id), episodes) is not None
    with torch.no_grad():
        inp = response_inputs(model, prompts, answers, tok.pad_token_id, keys=keys, episodes=episodes)
    assert cache_kwarg(model) in inp.forward
    model.train()
    outs = []
    # a wrong episode grouping (every row in one) must only share less, never change the numbers
    for k, e in ((None, None), (keys, episodes), (keys, [0] * len(prompts))):
        model.zero_grad(set_to_none=True)
        logits, targets, mask = response_logits(model, prompts, answers, tok.pad_token_id, keys=k, episodes=e)
        logp = logits.float().log_softmax(-1).gather(-1, targets[..., None])[..., 0]
        (-(logp * mask).sum()).backward()
        outs.append(((logp * mask).detach(),
                     {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}))
    (plain, g0), *shared = outs
    assert any(g.abs().sum() > 0 for g in g0.values())
    for logp, g in shared:
        assert torch.allclose(plain, logp, atol=1e-4)
        assert all(torch.allclose(g0[n], g[n], atol=1e-5, rtol=1e-3) for n in g0)


@torch.no_grad()
def test_generate_from_a_shared_prefix_matches_plain_generate():
    model, tok = _adapted()
    model.eval()
    prompts, _, keys = _prompts(tok)
    enc = tok.pad({"input_ids": [p.tolist() for p in prompts]}, return_tensors="pt")
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id, return_dict_in_generate=True,
              output_logits=True)
    plain = model.generate(**enc, **kw)
    split = split_prompts(prompts, keys, tok.pad_token_id)
    ids, mask = split.full()
    shared = model.generate(input_ids=ids, attention_mask=mask, **{cache_kwarg(model): prefill(model, split)},
                            **kw)
    P1, P2 = enc["input_ids"].shape[1], ids.shape[1]
    assert torch.equal(plain.sequences[:, P1:], shared.sequences[:, P2:])
    assert max((a - b).abs().max().item() for a, b in zip(plain.logits, shared.logits)) < 1e-4
