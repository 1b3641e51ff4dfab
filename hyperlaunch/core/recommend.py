"""The training settings a job uses when the user names none: decided once here, from the
model (a preset, or a local model directory's config.json), the hardware (CPU or GPU nodes)
and whether the job brings its own data, each with the reason it was chosen.

Both sides use it: `submit`/`render` write the chosen values into the trainer's command line
and print where each came from; the trainer fills the same values in when it is started by
hand without them. Torch-free (the CLI imports it on a login node)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hyperlaunch.core import gpu_memory
from hyperlaunch.core.models import ModelSpec

BUILT_IN_CORPUS_TOKENIZER = "offline"
"""The tokenizer shipped with the built-in corpus (hyperlaunch/data/assets): no network needed."""


@dataclass(frozen=True)
class Setting:
    """One training setting: the trainer option it fills (a TrainConfig field), its value and why."""

    name: str
    value: int | bool | str
    source: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def as_args(self) -> list[str]:
        """The trainer arguments that set it (`--x V`, `--x` / `--no-x` for switches)."""
        if isinstance(self.value, bool):
            return [self.flag if self.value else "--no-" + self.flag[2:]]
        return [self.flag, str(self.value)]


def recommended(
    spec: ModelSpec,
    *,
    origin: str,
    gpu: bool,
    hardware: str,
    data_given: bool,
    model_tokenizer: str | None = None,
    data_tokenizer: str | None = None,
    gpu_memory_gib: float | None = None,
    world: int = 1,
    given: Mapping[str, int | bool] | None = None,
    checkpoints: bool = True,
) -> list[Setting]:
    """The settings of a run of `spec` on `hardware` (GPU nodes when `gpu`), in the order
    `submit` prints them; `origin` says where the model's numbers come from (`preset X`, a
    config.json). The tokenizer: the one a prepared --data folder was made with
    (`data_tokenizer`, from its manifest: any other would fail the trainer's check); else
    `model_tokenizer`, a local model directory that holds its own; else the preset's; and
    without data, the tokenizer shipped with the built-in corpus.

    On GPUs whose memory is known (`gpu_memory_gib`, over `world` ranks) the sequence length,
    micro-batch and activation checkpointing are the preset's where they fit, else smaller
    (hyperlaunch.core.gpu_memory.fit), keeping the values the user set (`given`). A run that
    saves no checkpoint (`checkpoints` False: --no-checkpoints) gets no checkpoint cadence."""
    sized = f"{origin}, for {hardware}"
    seq_len, micro_batch = (spec.seq_len, spec.micro_batch_size) if gpu else (spec.cpu_seq_len, spec.cpu_micro_batch_size)
    checkpointing, checkpointing_source = spec.activation_checkpointing, origin
    seq_source = batch_source = sized
    if seq_len > spec.max_position_embeddings:
        seq_len = spec.max_position_embeddings
        seq_source = f"{sized}, capped at the model's max_position_embeddings"
    if gpu and gpu_memory_gib is not None:
        fitted = gpu_memory.fit(
            spec, seq_len=seq_len, micro_batch=micro_batch, gpu_memory_gib=gpu_memory_gib, world=world,
            sharding=spec.sharding, activation_checkpointing=spec.activation_checkpointing, cpu_offload=spec.cpu_offload,
            given=given or {},
        )
        why = f"{sized}: {fitted.reason}"
        if fitted.seq_len != seq_len:
            seq_source = why
        if fitted.micro_batch != micro_batch or fitted.seq_len != seq_len:
            batch_source = why
        seq_len, micro_batch = fitted.seq_len, fitted.micro_batch
        checkpointing, checkpointing_source = fitted.activation_checkpointing, why
    if not data_given:
        tokenizer, tokenizer_source = BUILT_IN_CORPUS_TOKENIZER, "no --data: the built-in corpus and its shipped tokenizer (no network)"
    elif data_tokenizer is not None:
        tokenizer, tokenizer_source = data_tokenizer, "the tokenizer --data was prepared with (its manifest.json)"
    elif model_tokenizer is not None:
        tokenizer, tokenizer_source = model_tokenizer, "the model directory's own tokenizer"
    else:
        tokenizer, tokenizer_source = spec.tokenizer, origin
    return [
        Setting("max_steps", spec.max_steps, origin),
        *([Setting("checkpoint_every", spec.checkpoint_every, origin)] if checkpoints else []),
        Setting("val_every", spec.val_every, origin),
        Setting("seq_len", seq_len, seq_source),
        Setting("micro_batch_size", micro_batch, batch_source),
        Setting("sharding", spec.sharding, origin),
        Setting("activation_checkpointing", checkpointing, checkpointing_source),
        Setting("cpu_offload", spec.cpu_offload, origin),
        Setting("tokenizer", tokenizer, tokenizer_source),
    ]


def given_names(trainer_args: Sequence[str]) -> set[str]:
    """TrainConfig field names the user set in the trainer's arguments (`--seq-len 8`,
    `--seq-len=8`, `--no-cpu-offload`)."""
    names = set()
    for arg in trainer_args:
        if arg.startswith("--"):
            flag = arg[2:].split("=", 1)[0]
            names.add(flag.replace("-", "_"))
            if flag.startswith("no-"):
                names.add(flag[3:].replace("-", "_"))
    return names


def sequence_warning(spec: ModelSpec, seq_len: int) -> str | None:
    """Why a sequence length longer than the model was configured for deserves a look."""
    if seq_len <= spec.max_position_embeddings:
        return None
    return (
        f"--seq-len {seq_len} is longer than {spec.name}'s max_position_embeddings "
        f"({spec.max_position_embeddings}): positions past it were never trained"
    )
