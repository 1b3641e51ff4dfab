"""The streaming safetensors writer (train/safetensors_stream.py) writes files the safetensors
library reads back exactly, from row blocks written one at a time, and refuses a short file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from hyperlaunch.train.safetensors_stream import StreamWriter, TensorEntry


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_blocks_written_in_order_read_back_as_the_whole_tensors(tmp_path: Path, dtype: torch.dtype) -> None:
    embed = torch.randn(10, 6).to(dtype)
    norm = torch.randn(7).to(dtype)
    path = tmp_path / "model.safetensors"
    writer = StreamWriter(str(path), [TensorEntry("embed", (10, 6), dtype), TensorEntry("norm", (7,), dtype)], {"format": "pt"})
    for block in (embed[:3], embed[3:8], embed[8:]):
        writer.write(block.clone())
    writer.write(norm)
    writer.close()
    with safe_open(str(path), framework="pt") as read:
        assert read.metadata() == {"format": "pt"}
        assert torch.equal(read.get_tensor("embed"), embed) and torch.equal(read.get_tensor("norm"), norm)
        assert read.get_tensor("embed").dtype == dtype


def test_a_file_with_fewer_bytes_than_its_header_promised_is_an_error(tmp_path: Path) -> None:
    writer = StreamWriter(str(tmp_path / "short.safetensors"), [TensorEntry("w", (4, 4), torch.float32)], {})
    writer.write(torch.zeros(2, 4))
    with pytest.raises(RuntimeError, match="promised"):
        writer.close()
