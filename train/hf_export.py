"""A DCP checkpoint of the bundled trainer as a Hugging Face model folder: config.json,
generation_config.json, safetensors shards with their index, the tokenizer. Loadable with
`AutoModelForCausalLM.from_pretrained`, with the checkpoint's weights exactly (fp32), or
rounded once to bf16.

Streaming: the checkpoint's `.metadata` gives every tensor's shape and dtype, so each output
shard's header is written first and the weights follow chunk by chunk as the ranks saved them
(FSDP2 saves row blocks): memory holds one saved chunk (twice: its bytes and the tensor), never
the model. A checkpoint whose chunks are not row blocks (another sharding) is read a tensor
at a time instead. Everything is written into a hidden folder beside the output and renamed
into place at the end, the marker last: an interrupted export leaves no folder that looks
complete, and an older export it replaces stays until the new one is whole.

    python -m hyperlaunch.train.hf_export --checkpoint DIR --output DIR [--dtype bf16|fp32]

(`hyperlaunch export` runs this, with torch, where the checkpoint is.) The trainer's own
`<model>-final` export, and `--export-every`, go through export_checkpoint too.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import resource
import shutil
import sys
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hyperlaunch.core import checkpoints as rules
from hyperlaunch.core import disk_space, hf_exports
from hyperlaunch.core.errors import CheckpointError, HyperlaunchError, InvalidInput

from .safetensors_stream import StreamWriter, TensorEntry

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DEFAULT_SHARD_BYTES = 1 << 30
MODEL_PREFIX = "model."
"""The trainer saves {"model": state_dict, "optim": ...}: DCP flattens the model's keys under it."""
INDEX_FILE = "model.safetensors.index.json"
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Exported:
    output: Path
    step: int
    dtype: str
    shards: int
    bytes: int
    seconds: float
    peak_rss_bytes: int


@dataclass(frozen=True)
class _Source:
    """One output tensor and the saved chunks it is made of."""

    key: str
    """Its name in the checkpoint (`model.` + the Hugging Face name)."""
    entry: TensorEntry
    chunks: list[Any]
    """DCP ChunkStorageMetadata, in row order."""
    rows: bool
    """The chunks are whole-width row blocks that tile the tensor: they stream in order."""


def _sources(metadata: Any, dtype: torch.dtype, tied: bool) -> list[_Source]:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    sources = []
    for key, item in metadata.state_dict_metadata.items():
        if not key.startswith(MODEL_PREFIX) or not isinstance(item, TensorStorageMetadata):
            continue
        name = key[len(MODEL_PREFIX):]
        if tied and name == "lm_head.weight":
            continue  # the embedding's weight: Hugging Face ties it again on load
        shape = tuple(int(n) for n in item.size)
        chunks = sorted(item.chunks, key=lambda chunk: tuple(chunk.offsets))
        rows, at = True, 0
        for chunk in chunks:
            offsets, sizes = tuple(chunk.offsets), tuple(chunk.sizes)
            rows = rows and bool(shape) and offsets[0] == at and all(o == 0 for o in offsets[1:]) and sizes[1:] == shape[1:]
            at += sizes[0] if sizes else 0
        rows = rows and bool(shape) and at == shape[0]
        sources.append(_Source(key, TensorEntry(name, shape, dtype), chunks, rows))
    if not sources:
        raise CheckpointError("the checkpoint holds no model weights (no 'model.' tensors): not one of the bundled trainer's")
    return sources


def _shards(sources: list[_Source], limit: int) -> list[list[_Source]]:
    shards: list[list[_Source]] = [[]]
    size = 0
    for source in sources:
        if shards[-1] and size + source.entry.nbytes > limit:
            shards.append([])
            size = 0
        shards[-1].append(source)
        size += source.entry.nbytes
    return shards


def _shard_name(index: int, count: int) -> str:
    return "model.safetensors" if count == 1 else f"model-{index + 1:05d}-of-{count:05d}.safetensors"


class _ChunkReader:
    """Reads one saved chunk of a tensor from the checkpoint's files, as DCP's FileSystemReader
    stores it (a torch.save of the chunk at an offset of a rank's file)."""

    def __init__(self, checkpoint: Path, metadata: Any) -> None:
        self.checkpoint = checkpoint
        self.storage = metadata.storage_data

    def _info(self, key: str, chunk: Any) -> Any:
        from torch.distributed.checkpoint.metadata import MetadataIndex

        return self.storage.get(MetadataIndex(key, chunk.offsets))

    def readable(self, key: str, chunk: Any) -> bool:
        """Stored plainly (not compressed or transformed): read here, else through DCP."""
        info = self._info(key, chunk)
        return info is not None and not getattr(info, "transform_descriptors", None)

    def read(self, key: str, chunk: Any) -> torch.Tensor:
        """torch.load reads the chunk straight from its place in the file: the tensor is the
        one copy in memory (a bytes copy of the record first would double the peak)."""
        info = self._info(key, chunk)
        with open(self.checkpoint / info.relative_path, "rb") as file:
            region = typing.cast(typing.IO[bytes], _Region(file, info.offset, info.length))
            return torch.load(region, map_location="cpu", weights_only=True)


class _Region(io.RawIOBase):
    """A read-only, seekable view of `length` bytes of `file` from `offset`."""

    def __init__(self, file: io.BufferedReader, offset: int, length: int) -> None:
        super().__init__()
        self._file, self._start, self._length, self._pos = file, offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._length}[whence]
        self._pos = min(max(base + offset, 0), self._length)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        wanted = min(len(buffer), self._length - self._pos)
        if wanted <= 0:
            return 0
        self._file.seek(self._start + self._pos)
        got = self._file.readinto(memoryview(buffer)[:wanted]) or 0
        self._pos += got
        return got


def _load_whole(checkpoint: Path, source: _Source, saved_dtype: torch.dtype) -> torch.Tensor:
    """A tensor through DCP itself, for chunks that are not row blocks."""
    import torch.distributed.checkpoint as dcp

    tensor = torch.empty(source.entry.shape, dtype=saved_dtype)
    dcp.load({source.key: tensor}, checkpoint_id=str(checkpoint), no_dist=True)
    return tensor


def _write_tensor(
    writer: StreamWriter, reader: _ChunkReader, source: _Source, saved_dtype: torch.dtype, progress: Callable[[int], None]
) -> None:
    dtype = source.entry.dtype
    if source.rows and all(reader.readable(source.key, chunk) for chunk in source.chunks):
        for chunk in source.chunks:
            part = reader.read(source.key, chunk).to(dtype)
            progress(writer.write(part))
            del part  # before the next chunk is read: one chunk in memory
        return
    progress(writer.write(_load_whole(reader.checkpoint, source, saved_dtype).to(dtype)))


def export_checkpoint(
    checkpoint: Path,
    output: Path,
    *,
    hf_config: Any,
    tokenizer: Any,
    dtype: str = "fp32",
    overwrite: bool = False,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    progress: Progress | None = None,
) -> Exported:
    """Write `checkpoint` (complete, DCP) as a Hugging Face model folder at `output`."""
    from torch.distributed.checkpoint import FileSystemReader

    started = time.perf_counter()
    checkpoint, output = Path(checkpoint), Path(output)
    _check_places(checkpoint, output, overwrite)
    metadata = FileSystemReader(str(checkpoint)).read_metadata()
    info = rules.read_info(checkpoint) or {}
    step = int(str(info.get("step", -1)))
    torch_dtype = DTYPES[dtype]
    sources = _sources(metadata, torch_dtype, bool(getattr(hf_config, "tie_word_embeddings", False)))
    shards = _shards(sources, shard_bytes)
    tensors: dict[str, Any] = metadata.state_dict_metadata  # _sources took only TensorStorageMetadata
    saved_dtypes = {s.key: tensors[s.key].properties.dtype for s in sources}
    total = sum(source.entry.nbytes for source in sources)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    staging = output.parent / f".{output.name}.partial-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    # An older export at `output` stays until the new one is whole: the new one needs its room.
    disk_space.check_room(output.parent, total, f"the export of {checkpoint.name}", hint=_room_hint(dtype))
    staging.mkdir(parents=True)
    try:
        reader = _ChunkReader(checkpoint, metadata)
        weight_map = {}
        for index, shard in enumerate(shards):
            name = _shard_name(index, len(shards))
            writer = StreamWriter(str(staging / name), [s.entry for s in shard], {"format": "pt"})
            for source in shard:
                _write_tensor(writer, reader, source, saved_dtypes[source.key], advance)
                weight_map[source.entry.name] = name
            writer.close()
        if len(shards) > 1:
            index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
            (staging / INDEX_FILE).write_text(json.dumps(index_doc, indent=2) + "\n")
        _write_config(staging, hf_config, torch_dtype)
        tokenizer.save(staging)
        marker = {"checkpoint": str(checkpoint.absolute()), "step": step, "dtype": dtype, "shards": len(shards), "bytes": total}
        (staging / hf_exports.EXPORT_MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        _put_in_place(staging, output)
    except BaseException as err:
        shutil.rmtree(staging, ignore_errors=True)
        full = disk_space.disk_full_error(err, output.parent, f"exporting {checkpoint.name}", needed=total, hint=_room_hint(dtype))
        if full is not None:
            raise full from None
        raise
    hf_exports.record_export(checkpoint, str(output.absolute()), dtype=dtype, step=step)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return Exported(output.absolute(), step, dtype, len(shards), total, time.perf_counter() - started, peak)


def _room_hint(dtype: str) -> str:
    smaller = ", or --dtype bf16 (half the size)" if dtype == "fp32" else ""
    return f"free space there, or export elsewhere: hyperlaunch export {disk_space.job_reference(os.environ)} --output DIR{smaller}"


def _check_places(checkpoint: Path, output: Path, overwrite: bool) -> None:
    if not rules.is_complete(checkpoint) or not (checkpoint / rules.METADATA_FILE).is_file():
        why = "it has no DCP .metadata (a save that never finished)" if checkpoint.is_dir() else "no such folder"
        raise CheckpointError(f"cannot export {checkpoint}: {why}")
    resolved_out, resolved_ckpt = output.resolve(), checkpoint.resolve()
    if resolved_out == resolved_ckpt or resolved_ckpt in resolved_out.parents or resolved_out in resolved_ckpt.parents:
        raise InvalidInput(f"--output {output} overlaps the checkpoint {checkpoint}: choose a folder beside it")
    if output.exists() and not overwrite:
        raise InvalidInput(f"--output {output} exists; pass --overwrite to replace it")
    if output.exists() and not output.is_dir():
        raise InvalidInput(f"--output {output} is a file, not a folder")


def _write_config(folder: Path, hf_config: Any, dtype: torch.dtype) -> None:
    from transformers import GenerationConfig

    hf_config = copy.deepcopy(hf_config)  # the trainer's own stays as it is
    # `dtype` since transformers 4.56 (`torch_dtype` before, and deprecated since).
    setattr(hf_config, "dtype" if hasattr(hf_config, "dtype") else "torch_dtype", dtype)
    hf_config.architectures = [_architecture(hf_config)]
    hf_config.save_pretrained(str(folder))
    GenerationConfig.from_model_config(hf_config).save_pretrained(str(folder))


def _architecture(hf_config: Any) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return str(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[hf_config.model_type])


def _put_in_place(staging: Path, output: Path) -> None:
    """Rename the finished folder to `output`; an older export there is moved aside first and
    removed only once the new one is in place."""
    old = None
    if output.exists():
        old = output.parent / f".{output.name}.old-{os.getpid()}"
        output.rename(old)
    staging.rename(output)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# -- the command the CLI runs --------------------------------------------------------------


def _places(args: argparse.Namespace) -> tuple[Path, Path]:
    """The checkpoint and output the arguments name; with --checkpoint-dir, chosen now (an
    export queued behind its training finds the checkpoint the training left)."""
    if args.checkpoint is not None:
        checkpoint = Path(args.checkpoint)
        step = rules.parse_step(checkpoint.name, checkpoint.name.rsplit("-", 1)[0])
        name = checkpoint.name.rsplit("-", 1)[0]
    else:
        if args.checkpoint_dir is None or not args.name:
            raise InvalidInput("name the checkpoint: --checkpoint DIR, or --checkpoint-dir DIR --name MODEL [--step N]")
        name, step = args.name, args.step
        if step is None:
            pointed = rules.read_pointer(args.checkpoint_dir, name)
            if pointed is None:
                raise CheckpointError(f"no {name}-latest in {args.checkpoint_dir}: no complete checkpoint to export")
            step = rules.parse_step(pointed, name)
        checkpoint = rules.checkpoint_path(args.checkpoint_dir, name, int(step or 0))
    if args.output is not None:
        return checkpoint, Path(args.output)
    if step is None:
        raise InvalidInput(f"--checkpoint {checkpoint} is not named <model>-<N>steps: pass --output")
    return checkpoint, hf_exports.default_output(checkpoint.parent, name, step)


def _source_of(checkpoint: Path, model: str | None, model_name: str | None, tokenizer: str | None) -> tuple[Any, Any]:
    """The checkpoint's Hugging Face config and tokenizer: what the trainer recorded in its
    hyperlaunch.json, else the model and tokenizer the caller names (older checkpoints)."""
    from transformers import AutoConfig

    from hyperlaunch.data.tokenizer import load_tokenizer

    from .modeling import resolve_model

    info = rules.read_info(checkpoint) or {}
    recorded = info.get("hf_config")
    if isinstance(recorded, dict):
        fields = dict(recorded)
        hf_config = AutoConfig.for_model(str(fields.pop("model_type")), **fields)
    else:
        chosen = model or (str(info["model"]) if isinstance(info.get("model"), str) else None)
        if chosen is None:
            raise InvalidInput(f"{checkpoint}: its hyperlaunch.json names no model; pass --model")
        hf_config = resolve_model(chosen, model_name).hf_config
    choice = tokenizer or (str(info["tokenizer"]) if isinstance(info.get("tokenizer"), str) else None)
    if choice is None:
        raise InvalidInput(f"{checkpoint}: its hyperlaunch.json names no tokenizer; pass --tokenizer")
    return hf_config, load_tokenizer(choice)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hyperlaunch.train.hf_export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, help="the checkpoint folder; or:")
    parser.add_argument("--checkpoint-dir", type=Path, help="with --name: the checkpoint of --step, else the one <name>-latest names now")
    parser.add_argument("--name")
    parser.add_argument("--step", type=int)
    parser.add_argument("--output", type=Path, help="default: <name>-<N>steps-hf beside the checkpoint")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--model", help="the model, for a checkpoint whose hyperlaunch.json does not record its config")
    parser.add_argument("--model-name")
    parser.add_argument("--tokenizer", help="the tokenizer, for a checkpoint that does not record it")
    parser.add_argument("--shard-mb", type=float, default=DEFAULT_SHARD_BYTES / 1e6)
    parser.add_argument("--progress", choices=["json", "none"], default="none", help="json: one line per 1 %% on stdout")
    args = parser.parse_args(argv)
    emit = _json_progress() if args.progress == "json" else None
    try:
        checkpoint, output = _places(args)
        # A folder the user named: --overwrite replaces an earlier export, never their files.
        # The trainer's own exports (its names, in its checkpoint folder) replace as they did.
        refusal = hf_exports.not_replaceable(output) if args.overwrite else None
        if refusal is not None:
            raise InvalidInput(refusal)
        hf_config, tokenizer = _source_of(checkpoint, args.model, args.model_name, args.tokenizer)
        result = export_checkpoint(
            checkpoint, output, hf_config=hf_config, tokenizer=tokenizer, dtype=args.dtype,
            overwrite=args.overwrite, shard_bytes=max(1, int(args.shard_mb * 1e6)), progress=emit,
        )
    except HyperlaunchError as err:
        print(json.dumps({"event": "error", "message": err.one_line(), "exit_code": err.exit_code}), flush=True)
        print(f"hyperlaunch export: error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    print(json.dumps({"event": "done", **{k: str(v) if isinstance(v, Path) else v for k, v in result.__dict__.items()}}), flush=True)
    return 0


def _json_progress() -> Progress:
    last = [-1]

    def emit(done: int, total: int) -> None:
        percent = done * 100 // max(total, 1)
        if percent != last[0]:
            last[0] = percent
            print(json.dumps({"event": "progress", "bytes": done, "total": total}), flush=True)

    return emit


if __name__ == "__main__":
    sys.exit(main())
