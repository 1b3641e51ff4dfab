"""Model presets: preset name -> `ModelSpec` (architecture plus recommended settings).

Torch-free on purpose: the CLI imports this to validate `--model`, pick defaults and render
sbatch scripts, and must stay fast and importable on a login node without torch.
The trainer (`hyperlaunch.train`) turns a spec into a Hugging Face config with
`ModelSpec.hf_config_kwargs()`.

Recommended settings follow the HyperPod guide's table by size: small (< 1B) 1 node, micro-batch
2-4, long context; medium (1B-10B) 1-2 nodes of 4-8 GPUs, micro-batch 1-2, bf16, offload only
if needed; large: micro-batch 1, bf16, activation checkpointing, prefetch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from hyperlaunch.core.errors import InvalidInput, ModelUnavailable
from hyperlaunch.core.suggest import did_you_mean

ArchitectureKind = Literal["qwen3", "llama"]
Sharding = Literal["full", "grad-op", "hybrid", "none"]
MixedPrecision = Literal["bf16", "fp32"]

SHARDING_CHOICES: tuple[str, ...] = get_args(Sharding)
MIXED_PRECISION_CHOICES: tuple[str, ...] = get_args(MixedPrecision)

# Size of the offline byte-level tokenizer shipped in hyperlaunch/data/assets/ (256 bytes,
# merges and special tokens). Tiny presets use it so they run with no download.
OFFLINE_TOKENIZER_VOCAB = 512


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """One trainable model: its Hugging Face architecture and how to run it well."""

    name: str
    """Preset name, also the prefix of checkpoint directories (`<name>-<N>steps`)."""
    kind: ArchitectureKind
    """Hugging Face architecture family: `qwen3` (QK-norm) or `llama`."""
    hidden_size: int
    """Width of the residual stream."""
    num_layers: int
    """Number of decoder blocks (each one FSDP group)."""
    num_heads: int
    """Attention (query) heads."""
    num_kv_heads: int
    """Key/value heads (grouped-query attention when fewer than num_heads)."""
    head_dim: int
    """Per-head width; Qwen3 sets it explicitly (not hidden_size / num_heads)."""
    intermediate_size: int
    """MLP inner width."""
    vocab_size: int
    """Embedding rows; must cover the tokenizer."""
    tie_word_embeddings: bool
    """Input embedding and output layer share one weight (one FSDP group)."""
    rope_theta: float
    """Rotary base frequency."""
    rms_norm_eps: float
    """RMSNorm epsilon."""
    max_position_embeddings: int
    """Longest context the architecture is configured for."""
    rope_scaling: tuple[tuple[str, float | int | str], ...] | None = None
    """Llama 3 rotary scaling as (key, value) pairs; None for plain RoPE."""
    description: str = ""
    """One line shown by the CLI."""
    micro_batch_size: int = 1
    """Recommended sequences per GPU per step."""
    seq_len: int = 2048
    """Recommended training sequence length (tokens) on GPUs."""
    cpu_micro_batch_size: int = 1
    """Recommended sequences per rank on a CPU node (the dev cluster: one rank per node)."""
    cpu_seq_len: int = 64
    """Recommended sequence length on a CPU node: what two ranks of the model fit in a 24 GiB
    machine, at a step time of seconds to tens of seconds."""
    mixed_precision: MixedPrecision = "bf16"
    """Recommended parameter dtype during compute."""
    activation_checkpointing: bool = False
    """Recommended: recompute block activations in backward to save memory."""
    cpu_offload: bool = False
    """Recommended: keep sharded parameters and optimizer state in host memory."""
    sharding: Sharding = "full"
    """Recommended FSDP2 sharding mode."""
    max_steps: int = 100
    """Recommended optimizer steps for a run started without --max-steps."""
    checkpoint_every: int = 50
    """Recommended steps between checkpoints."""
    val_every: int = 100
    """Recommended steps between validation passes."""
    nodes: int = 1
    """Recommended node count."""
    gpus_per_node: int = 8
    """Recommended GPUs (= torchrun processes) per node."""
    tokenizer: str = "offline"
    """Tokenizer: `offline` (shipped byte-level BPE) or a hub name / local dir."""

    def __post_init__(self) -> None:
        if self.kind not in ("qwen3", "llama"):
            raise InvalidInput(f"model kind {self.kind!r} is not one of: qwen3, llama")
        if self.num_heads % self.num_kv_heads:
            raise InvalidInput(f"{self.name}: num_heads must be a multiple of num_kv_heads")
        for field_name in ("seq_len", "cpu_seq_len", "micro_batch_size", "cpu_micro_batch_size", "max_steps"):
            if getattr(self, field_name) < 1:
                raise InvalidInput(f"{self.name}: {field_name} must be at least 1")
        if self.sharding not in SHARDING_CHOICES:
            raise InvalidInput(f"{self.name}: sharding must be one of {', '.join(SHARDING_CHOICES)}")

    def hf_config_kwargs(self) -> dict[str, object]:
        """Keyword arguments for transformers' Qwen3Config / LlamaConfig."""
        kwargs: dict[str, object] = {
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": self.tie_word_embeddings,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
        }
        if self.rope_scaling is not None:
            kwargs["rope_scaling"] = dict(self.rope_scaling)
        return kwargs

    @property
    def num_params(self) -> int:
        """Total parameter count (tied embeddings counted once)."""
        return self.non_embedding_params + self.vocab_size * self.hidden_size * (
            1 if self.tie_word_embeddings else 2
        )

    @property
    def non_embedding_params(self) -> int:
        """Parameters in the decoder blocks and final norm: what 6N FLOPs/token counts."""
        h, d = self.hidden_size, self.head_dim
        attention = h * self.num_heads * d * 2 + h * self.num_kv_heads * d * 2
        qk_norm = 2 * d if self.kind == "qwen3" else 0
        mlp = 3 * h * self.intermediate_size
        norms = 2 * h
        return self.num_layers * (attention + qk_norm + mlp + norms) + h

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 x non-embedding params + attention (the PaLM-paper
        convention MFU figures are usually reported in)."""
        attention = 6 * self.num_layers * self.num_heads * self.head_dim * seq_len * 2
        return 6.0 * self.non_embedding_params + attention

    def flops_per_token_with_output(self, seq_len: int) -> float:
        """flops_per_token plus the output projection, 6 x vocabulary x hidden (torchtitan's
        convention): a quarter of qwen3_0_6b's matmul FLOPs, which the other figure leaves out."""
        return self.flops_per_token(seq_len) + 6.0 * self.vocab_size * self.hidden_size


_LLAMA3_1_ROPE_SCALING: tuple[tuple[str, float | int | str], ...] = (
    ("rope_type", "llama3"),
    ("factor", 8.0),
    ("low_freq_factor", 1.0),
    ("high_freq_factor", 4.0),
    ("original_max_position_embeddings", 8192),
)
_LLAMA3_2_ROPE_SCALING: tuple[tuple[str, float | int | str], ...] = (
    ("rope_type", "llama3"),
    ("factor", 32.0),
    ("low_freq_factor", 1.0),
    ("high_freq_factor", 4.0),
    ("original_max_position_embeddings", 8192),
)


def qwen3_0_6b() -> ModelSpec:
    return ModelSpec(
        name="qwen3_0_6b",
        kind="qwen3",
        description="Qwen3-0.6B (the HyperPod guide's model); small: 1 node, micro-batch 4",
        hidden_size=1024,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=3072,
        vocab_size=151936,
        tie_word_embeddings=True,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=40960,
        # 4, not 2: with the fused loss the logits no longer cap it, and at 2 a step is too short
        # for the GPU to stay busy (one H200: 85,644 tokens/s at 4, 63,615 at 2; docs/performance.md).
        micro_batch_size=4,
        seq_len=4096,
        cpu_micro_batch_size=1,
        cpu_seq_len=64,
        mixed_precision="bf16",
        max_steps=100,
        checkpoint_every=50,
        val_every=100,
        nodes=1,
        gpus_per_node=4,
        tokenizer="Qwen/Qwen3-0.6B",
    )


def qwen3_1_7b() -> ModelSpec:
    return ModelSpec(
        name="qwen3_1_7b",
        kind="qwen3",
        description="Qwen3-1.7B; medium: 1-2 nodes, micro-batch 1-2, bf16",
        hidden_size=2048,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=6144,
        vocab_size=151936,
        tie_word_embeddings=True,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=40960,
        micro_batch_size=2,
        seq_len=4096,
        mixed_precision="bf16",
        max_steps=1000,
        checkpoint_every=100,
        val_every=100,
        nodes=1,
        gpus_per_node=8,
        tokenizer="Qwen/Qwen3-1.7B",
    )


def llama3_2_1b() -> ModelSpec:
    return ModelSpec(
        name="llama3_2_1b",
        kind="llama",
        description="Llama 3.2 1B (tied embeddings); medium: 1 node, micro-batch 2, bf16",
        hidden_size=2048,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
        tie_word_embeddings=True,
        rope_theta=500_000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        rope_scaling=_LLAMA3_2_ROPE_SCALING,
        micro_batch_size=2,
        seq_len=4096,
        mixed_precision="bf16",
        max_steps=1000,
        checkpoint_every=100,
        val_every=100,
        nodes=1,
        gpus_per_node=8,
        tokenizer="meta-llama/Llama-3.2-1B",
    )


def llama3_1_8b() -> ModelSpec:
    return ModelSpec(
        name="llama3_1_8b",
        kind="llama",
        description="Llama 3.1 8B; medium-large: 2 nodes, micro-batch 1, bf16, activation checkpointing",
        hidden_size=4096,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        tie_word_embeddings=False,
        rope_theta=500_000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        rope_scaling=_LLAMA3_1_ROPE_SCALING,
        micro_batch_size=1,
        seq_len=4096,
        mixed_precision="bf16",
        activation_checkpointing=True,
        max_steps=1000,
        checkpoint_every=200,
        val_every=200,
        nodes=2,
        gpus_per_node=8,
        tokenizer="meta-llama/Llama-3.1-8B",
    )


def qwen3_tiny() -> ModelSpec:
    return ModelSpec(
        name="qwen3_tiny",
        kind="qwen3",
        description="Tiny Qwen3 for tests and CPU demos (tied embeddings, offline tokenizer)",
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=OFFLINE_TOKENIZER_VOCAB,
        tie_word_embeddings=True,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        micro_batch_size=2,
        seq_len=64,
        cpu_micro_batch_size=2,
        cpu_seq_len=64,
        mixed_precision="fp32",
        max_steps=40,
        checkpoint_every=10,
        val_every=20,
        nodes=1,
        gpus_per_node=2,
    )


def llama_tiny() -> ModelSpec:
    return ModelSpec(
        name="llama_tiny",
        kind="llama",
        description="Tiny Llama (~3M parameters, untied) for tests and CPU demos",
        hidden_size=256,
        num_layers=4,
        num_heads=8,
        num_kv_heads=4,
        head_dim=32,
        intermediate_size=688,
        vocab_size=OFFLINE_TOKENIZER_VOCAB,
        tie_word_embeddings=False,
        rope_theta=500_000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=2048,
        micro_batch_size=2,
        seq_len=128,
        cpu_micro_batch_size=2,
        cpu_seq_len=128,
        mixed_precision="fp32",
        max_steps=40,
        checkpoint_every=10,
        val_every=20,
        nodes=1,
        gpus_per_node=2,
    )


PRESETS: dict[str, Callable[[], ModelSpec]] = {
    "qwen3_0_6b": qwen3_0_6b,
    "qwen3_1_7b": qwen3_1_7b,
    "llama3_2_1b": llama3_2_1b,
    "llama3_1_8b": llama3_1_8b,
    "qwen3_tiny": qwen3_tiny,
    "llama_tiny": llama_tiny,
}


def preset_names() -> list[str]:
    return list(PRESETS)


def _folded(name: str) -> str:
    """A name as model cards and hubs spell it (`Qwen3-0.6B`) and as presets do (`qwen3_0_6b`)
    read alike."""
    return re.sub(r"[-.]", "_", name.lower())


def did_you_mean_preset(name: str) -> str:
    """` (did you mean qwen3_0_6b?)` for an unknown preset name (`qwen3-0.6b`), or "" when none is close."""
    return did_you_mean(name, PRESETS, fold=_folded)


def get_preset(name: str) -> ModelSpec:
    """The spec for a preset name; InvalidInput listing the presets (and the closest) when it is unknown."""
    try:
        factory = PRESETS[name]
    except KeyError:
        raise InvalidInput(
            f"unknown model preset {name!r}{did_you_mean_preset(name)}; presets: {', '.join(PRESETS)}",
            hint="or pass a local Hugging Face model directory",
        ) from None
    return factory()


def spec_from_model_directory(directory: str | Path, name: str) -> ModelSpec:
    """The spec of a local Hugging Face model directory, from its config.json; one line
    (ModelUnavailable) when that file cannot be read or is not a JSON object. The CLI checks
    a model here at submit, the trainer again on the node."""
    config_file = Path(directory) / "config.json"
    try:
        raw = json.loads(config_file.read_text(encoding="utf-8"))
    except OSError as err:
        raise ModelUnavailable(f"--model {directory}: cannot read {config_file} ({err.strerror or err})") from None
    except ValueError as err:  # UnicodeDecodeError included
        raise ModelUnavailable(f"{config_file} is not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise ModelUnavailable(f"{config_file} is not a JSON object")
    return spec_from_hf_config(name, raw)


def spec_from_hf_config(name: str, config: dict[str, object]) -> ModelSpec:
    """A spec for a local Hugging Face model directory, from its parsed config.json.

    Only the architecture numbers matter (FLOPs, checkpoint checks); the recommended settings
    are those of a small model.
    """
    model_type = str(config.get("model_type", ""))
    if model_type not in ("qwen3", "llama"):
        raise InvalidInput(f"model type {model_type!r} in {name} is not supported; supported: qwen3, llama")

    def number(key: str, default: object = None) -> object:
        value = config.get(key, default)
        if value is None:
            raise InvalidInput(f"config.json of {name} has no {key!r}")
        return value

    hidden = int(str(number("hidden_size")))
    heads = int(str(number("num_attention_heads")))
    rope = config.get("rope_parameters") or config.get("rope_scaling")
    theta = config.get("rope_theta") or (rope.get("rope_theta") if isinstance(rope, dict) else None)
    return ModelSpec(
        name=name,
        kind=model_type,  # type: ignore[arg-type]
        description=f"local Hugging Face model {name}",
        hidden_size=hidden,
        num_layers=int(str(number("num_hidden_layers"))),
        num_heads=heads,
        num_kv_heads=int(str(config.get("num_key_value_heads") or heads)),
        head_dim=int(str(config.get("head_dim") or hidden // heads)),
        intermediate_size=int(str(number("intermediate_size"))),
        vocab_size=int(str(number("vocab_size"))),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        rope_theta=float(str(theta or 10000.0)),
        rms_norm_eps=float(str(config.get("rms_norm_eps", 1e-6))),
        max_position_embeddings=int(str(config.get("max_position_embeddings", 2048))),
        seq_len=512,
        micro_batch_size=1,
        cpu_seq_len=64,
        cpu_micro_batch_size=1,
        max_steps=100,
        checkpoint_every=50,
        val_every=100,
    )
