"""How much GPU memory one rank of the bundled trainer needs, estimated from the model's shapes,
and the sequence length, micro-batch and activation checkpointing that fit a GPU.

The estimate, per GPU, for FSDP2 in bf16 with fp32 master weights and AdamW over `world` ranks:

- states: 16 bytes a parameter (fp32 weight, gradient, two AdamW moments), sharded over the
  ranks (`none`: not sharded); the fused AdamW keeps no temporaries beside them;
- activations: the tensors autograd keeps for one decoder layer, counted from Hugging Face's
  Qwen3/Llama layer run eagerly (RMSNorm's fp32 copy, q/k/v after norm and RoPE, what SDPA
  keeps, the MLP's gate, SiLU, up and product): 12h + 16q + 14kv + 8i bytes a token (h hidden,
  q = heads x head_dim, kv = kv heads x head_dim, i the MLP's width); with activation
  checkpointing only each layer's bf16 input stays (2h), and one layer is recomputed at a time.
  `--compile` keeps less (it fuses the elementwise work), so for it the count is an upper bound;
- the loss (train/losses.py: chunked or fused, never the whole logits): one 1,024-token chunk of
  fp32 logits twice, the output weight's fp32 gradient, the unsharded bf16 embedding (and output
  layer when not tied);
- on one rank, every block's gathered bf16 parameters, where they fit (one rank keeps them from
  forward to backward, 16 % faster for qwen3_0_6b; where they would not fit, as for
  llama3_1_8b's 13 GiB on one H200, it reshards after forward like several ranks do: `layout`);
- there, where it fits, one FSDP group for the whole model: at the end of backward FSDP copies
  every bf16 gradient (2 bytes a parameter) into one fp32 buffer (4) and reduces it into
  another (4: the gradient itself on a step's first micro-batch, a second buffer beside it on
  the next ones, `--grad-accum`), when the activations and the loss's memory are gone: the
  estimate counts the larger of the two (`reduced_at_once_bytes`);
- a fixed 1 GiB for what the CUDA caching allocator does not count: the CUDA context, cuBLAS
  workspaces, NCCL's buffers.

With CPU offload (`--cpu-offload`, FSDP2's CPUOffloadPolicy) the states live in host memory
(16 bytes a parameter over the ranks, pinned: `state_bytes`) and AdamW steps there: the
GPU keeps none of them, only the shards passing through it, for two blocks at a time (the one
computing and the one FSDP gathers ahead): each block's fp32 shard copied in before it is
gathered, and in backward its reduced fp32 gradient shard before the copy back (4 + 4 bytes a
parameter, over the ranks); and the embedding's fp32 shard on its way in. The bf16 gradients and
the reduce-scatter's input exist as they do without offload, which the estimate does not count
either. Not yet checked against a GPU's peak.

Checked against the peaks `bench gpu` measured (qwen3_0_6b, seq 4096, one H200, fused loss,
max_memory_allocated, 2026-11-26): micro-batch 2 eager 24.1 GiB (estimated 30.7), compiled 18.4;
micro-batch 4 compiled 28.1 (estimated, eager, 48.6); micro-batch 2 with activation
checkpointing and compile 9.5 (estimated 13.8). The estimate is an upper bound, as a
recommendation's should be. Standard library only: the CLI decides on a login node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hyperlaunch.core.models import ModelSpec

GIB = 1024**3
STATE_BYTES_PER_PARAM = 16
LOSS_CHUNK_TOKENS = 1024
FIXED_GIB = 1.0
HEADROOM = 0.9
"""The share of a GPU's memory a recommendation may plan for: the rest absorbs what the
estimate leaves out (a longer validation batch, fragmentation, another library's buffers)."""
MIN_SEQ_LEN = 512


def activation_bytes_per_token_per_layer(spec: ModelSpec) -> int:
    """What autograd keeps of one decoder layer for one token, in bytes (module docstring)."""
    h, q, kv = spec.hidden_size, spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    return 12 * h + 16 * q + 14 * kv + 8 * spec.intermediate_size


def gathered_bytes(spec: ModelSpec) -> int:
    """Every block's gathered bf16 parameters: what one rank keeps from forward to backward
    when it does not reshard after forward."""
    return 2 * spec.non_embedding_params


def _shards(world: int, sharding: str) -> int:
    """Over how many ranks the states are sharded (`none`: not sharded)."""
    return 1 if sharding == "none" else max(1, world)


def offload_in_flight_bytes(spec: ModelSpec, *, world: int = 1, sharding: str = "full") -> float:
    """What CPU offload passes through one GPU at once (module docstring): two blocks' fp32
    shards in and reduced fp32 gradient shards out, and the embedding's fp32 shard."""
    block = spec.non_embedding_params // max(1, spec.num_layers)
    return (2 * block * (4 + 4) + spec.vocab_size * spec.hidden_size * 4) / _shards(world, sharding)


def state_bytes(spec: ModelSpec, *, world: int, sharding: str = "full") -> float:
    """One rank's states: 16 bytes a parameter over the ranks, in GPU memory, or with CPU
    offload in (pinned) host memory."""
    return spec.num_params * STATE_BYTES_PER_PARAM / _shards(world, sharding)


def reduced_at_once_bytes(
    spec: ModelSpec, *, world: int, grad_accum: int = 1, sharding: str = "full", cpu_offload: bool = False,
) -> float:
    """What one FSDP group for the whole model adds beside the states at the end of backward,
    where FSDP reduces every gradient at once: first every bf16 gradient (2 bytes a parameter,
    unsharded) beside the fp32 buffer they are copied into (4, unsharded), then that buffer
    beside the reduced one (4 / ranks). On a step's first micro-batch the reduced buffer becomes
    the fp32 gradient the states count, which does not exist before it; on the next ones
    (--grad-accum) it is added into that gradient, beside it. With CPU offload the states are
    in host memory: the reduced buffer is copied there, and counts in full."""
    params = spec.num_params
    output = params * 4 / _shards(world, sharding)
    accumulating = grad_accum > 1
    copying_in = params * (2 + 4) - (0 if accumulating or cpu_offload else output)
    reduced = params * 4 + (output if accumulating and not cpu_offload else 0)  # offloaded: accumulated on the host
    return max(copying_in, reduced)


def estimate_gib(
    spec: ModelSpec,
    *,
    seq_len: int,
    micro_batch: int,
    activation_checkpointing: bool,
    world: int,
    sharding: str = "full",
    reshard_after_forward: bool | None = None,
    one_group: bool | None = None,
    grad_accum: int = 1,
    cpu_offload: bool = False,
) -> float:
    """Peak GPU memory of one rank, in GiB (module docstring); `reshard_after_forward` and
    `one_group` None: as the trainer lays out FSDP without knowing the GPU (several ranks
    reshard, a group per block; one keeps its gathered parameters, in one group)."""
    # With CPU offload the states are in host memory: only what passes through counts.
    if cpu_offload:
        states = offload_in_flight_bytes(spec, world=world, sharding=sharding)
    else:
        states = state_bytes(spec, world=world, sharding=sharding)
    tokens = seq_len * micro_batch
    layer = activation_bytes_per_token_per_layer(spec)
    if activation_checkpointing:
        activations = tokens * (spec.num_layers * 2 * spec.hidden_size + layer)
    else:
        activations = tokens * spec.num_layers * layer
    embedding = spec.vocab_size * spec.hidden_size
    loss = 2 * min(tokens, LOSS_CHUNK_TOKENS) * spec.vocab_size * 4 + embedding * 4
    unsharded = embedding * 2 * (1 if spec.tie_word_embeddings else 2)
    reshard = world > 1 if reshard_after_forward is None else reshard_after_forward
    gathered = 0 if reshard else gathered_bytes(spec)
    whole = world == 1 and not reshard if one_group is None else one_group
    reduced_at_once = (
        reduced_at_once_bytes(spec, world=world, grad_accum=grad_accum, sharding=sharding, cpu_offload=cpu_offload)
        if whole else 0
    )
    return (states + max(activations + loss, reduced_at_once) + unsharded + gathered) / GIB + FIXED_GIB


@dataclass(frozen=True)
class Layout:
    """How the trainer shards the model with FSDP2 (train/sharding.py)."""

    reshard_after_forward: bool
    """Free each block's gathered parameters after its forward; gather them again for backward."""
    one_group: bool
    """The whole model as one FSDP group, not a group per decoder block."""


def layout(
    spec: ModelSpec,
    *,
    seq_len: int,
    micro_batch: int,
    activation_checkpointing: bool,
    world: int,
    gpu_memory_gib: float | None,
    grad_accum: int = 1,
    cpu_offload: bool = False,
    prefetch: int = 0,
    reshard_after_forward: bool | None = None,
    one_group: bool | None = None,
) -> Layout:
    """The layout the trainer uses where the user does not say (None): on several ranks a group
    per block, resharded after forward (FSDP's default: the gathered copies are the other ranks'
    shards). On one rank the first of these that fits in HEADROOM of the GPU (without a GPU, or
    where none fits, the first and the last):

    1. one group, kept from forward to backward: FSDP has nothing to overlap on one rank and
       nothing to free block by block, and a group per block only runs its hooks around every
       block, host time a small model's GPU step cannot hide (torchtitan runs one GPU without
       FSDP at all); its gradients are reduced once, at the end of backward (module docstring);
    2. a group per block, kept: 16 % faster than resharding for qwen3_0_6b;
    3. a group per block, resharded, as several ranks do (llama3_1_8b on one H200).

    CPU offload (which moves each block's gradients to the host as they come) and --prefetch
    (which gathers blocks ahead) keep a group per block. What the user set stays."""
    if one_group and reshard_after_forward:
        raise ValueError("one FSDP group keeps its gathered parameters from forward to backward: it does not reshard")
    if world > 1:
        grouped = bool(one_group)
        return Layout(not grouped if reshard_after_forward is None else reshard_after_forward, grouped)
    candidates = [Layout(False, True), Layout(False, False), Layout(True, False)]
    allowed = [
        c for c in candidates
        if (reshard_after_forward is None or c.reshard_after_forward == reshard_after_forward)
        and (c.one_group == one_group if one_group is not None else not ((cpu_offload or prefetch > 0) and c.one_group))
    ]
    if gpu_memory_gib is None:
        return allowed[0]
    for choice in allowed:
        needed = estimate_gib(
            spec, seq_len=seq_len, micro_batch=micro_batch, activation_checkpointing=activation_checkpointing,
            world=world, reshard_after_forward=choice.reshard_after_forward, one_group=choice.one_group,
            grad_accum=grad_accum, cpu_offload=cpu_offload,
        )
        if needed <= gpu_memory_gib * HEADROOM:
            return choice
    return allowed[-1]


@dataclass(frozen=True)
class Fit:
    """The settings chosen for one GPU, the estimate they were chosen by and why."""

    seq_len: int
    micro_batch: int
    activation_checkpointing: bool
    estimate_gib: float
    reason: str


def fit(
    spec: ModelSpec,
    *,
    seq_len: int,
    micro_batch: int,
    gpu_memory_gib: float,
    world: int,
    sharding: str = "full",
    activation_checkpointing: bool = False,
    cpu_offload: bool = False,
    given: Mapping[str, int | bool] | None = None,
) -> Fit:
    """The preset's sequence length, micro-batch and activation checkpointing (its target, sized
    for an 80 GB GPU) where they fit in HEADROOM of `gpu_memory_gib`; else, in this order,
    activation checkpointing on, a smaller micro-batch, a shorter sequence (halved, down to
    MIN_SEQ_LEN). What the user set (`given`: seq_len, micro_batch_size,
    activation_checkpointing) stays as set, and its grad_accum (default 1) and cpu_offload (else
    the preset's) are counted. Where nothing fits, the smallest, and the reason says so."""
    given = given or {}
    offload = bool(given.get("cpu_offload", cpu_offload))
    budget = gpu_memory_gib * HEADROOM
    seq_len = int(given.get("seq_len", seq_len))
    micro_batch = int(given.get("micro_batch_size", micro_batch))
    ac_choices = [bool(given["activation_checkpointing"])] if "activation_checkpointing" in given else [False, True]
    batches = [micro_batch] if "micro_batch_size" in given else _halvings(micro_batch, 1)
    seqs = [seq_len] if "seq_len" in given else _halvings(seq_len, MIN_SEQ_LEN)
    candidates = [(seq_len, micro_batch, ac) for ac in ac_choices]
    candidates += [(seq_len, batch, ac_choices[-1]) for batch in batches[1:]]
    candidates += [(seq, batches[-1], ac_choices[-1]) for seq in seqs[1:]]
    room = f"{gpu_memory_gib:g} GiB ({world} GPU{'s' if world != 1 else ''})"

    grad_accum = int(given.get("grad_accum", 1))

    def estimate(seq: int, batch: int, ac: bool, offloaded: bool = offload) -> float:
        chosen = layout(
            spec, seq_len=seq, micro_batch=batch, activation_checkpointing=ac, world=world, gpu_memory_gib=gpu_memory_gib,
            grad_accum=grad_accum, cpu_offload=offloaded,
        )
        return estimate_gib(
            spec, seq_len=seq, micro_batch=batch, activation_checkpointing=ac, world=world, sharding=sharding,
            reshard_after_forward=chosen.reshard_after_forward, one_group=chosen.one_group, grad_accum=grad_accum,
            cpu_offload=offloaded,
        )

    host = f"; the offloaded states take {state_bytes(spec, world=world, sharding=sharding) / GIB:.1f} GiB of host memory a GPU"
    held = host if offload else ""
    preset = (seq_len, micro_batch, activation_checkpointing if "activation_checkpointing" not in given else ac_choices[0])
    for seq, batch, ac in candidates:
        needed = estimate(seq, batch, ac)
        if needed <= budget:
            if (seq, batch, ac) == preset or (seq, batch) == preset[:2] and not ac:
                return Fit(seq, batch, ac, needed, f"estimated {needed:.1f} GiB a GPU of {room}{held}")
            return Fit(
                seq, batch, ac, needed,
                f"{estimate(*preset):.1f} GiB a GPU as the preset has it, {needed:.1f} GiB so, of {room}{held}",
            )
    seq, batch, ac = seq_len, batches[-1], ac_choices[-1]
    needed = estimate(seq, batch, ac)
    remedies = "more GPUs or a shorter --seq-len"
    offloaded = estimate(seq, batch, ac, offloaded=True) if not offload else None
    if offloaded is not None and offloaded <= budget:
        remedies = f"more GPUs, a shorter --seq-len or --cpu-offload ({offloaded:.1f} GiB a GPU{host})"
    return Fit(seq, batch, ac, needed, f"does not fit: {needed:.1f} GiB a GPU even so, of {room}; use {remedies}")


def _halvings(value: int, floor: int) -> list[int]:
    """value, value/2, ... down to floor (value itself even when below floor)."""
    values = [value]
    while values[-1] // 2 >= floor:
        values.append(values[-1] // 2)
    return values
