"""Safetensors files written a piece at a time. The safetensors library writes a file from
tensors all held in memory; a checkpoint export must not hold the model (qwen3_0_6b is 2.4 GB
in fp32, a login node may have little more), so this writes the format itself: the header,
known up front from the shapes and dtypes, then each tensor's bytes in order, as they are read.
The files are read back with the safetensors library in the tests.

The format (github.com/huggingface/safetensors): 8 bytes little-endian header length N, N bytes
of JSON (`{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}`, padded with
spaces to a multiple of 8), then the tensors' bytes, row-major, little-endian.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

import torch

DTYPE_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


def header_bytes(entries: list[TensorEntry], metadata: dict[str, str]) -> bytes:
    """The length-prefixed, padded JSON header of a file holding `entries` in this order."""
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for entry in entries:
        header[entry.name] = {"dtype": DTYPE_NAMES[entry.dtype], "shape": list(entry.shape), "data_offsets": [offset, offset + entry.nbytes]}
        offset += entry.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


class StreamWriter:
    """One safetensors file: `write(tensor)` appends the next bytes of the current entry, in
    order; `close()` checks that every byte the header promised was written."""

    def __init__(self, path: str, entries: list[TensorEntry], metadata: dict[str, str]) -> None:
        self.path = path
        self.entries = entries
        self.expected = sum(entry.nbytes for entry in entries)
        self.written = 0
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._file.write(header_bytes(entries, metadata))

    def write(self, part: torch.Tensor) -> int:
        """Append a contiguous CPU tensor's bytes (a row block of the current entry)."""
        data = part.contiguous().view(torch.uint8).numpy()
        self._file.write(data.data)
        self.written += data.nbytes
        return int(data.nbytes)

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        if self.written != self.expected:
            raise RuntimeError(f"{self.path}: wrote {self.written} bytes of tensors, the header promised {self.expected}")
