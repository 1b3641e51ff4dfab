"""The text `prepare-data` tokenizes: .txt, .jsonl and .parquet files, Hugging Face
`save_to_disk` folders, and folders of them, each cut into units of work of about the same
size that worker processes read on their own.

Documents: a .jsonl row's text field, a .parquet or dataset row's text column; in a .txt file
blank lines separate documents, and a file without any is one document per line. Cutting a
file into units never changes its documents: a unit of a .txt or .jsonl file ends right after
a separator (a blank line, a line end), a .parquet unit is whole row groups, a dataset unit a
range of rows. The order of documents is the order of the inputs, then of paths in a folder.

Torch-free; pyarrow (.parquet) and datasets (save_to_disk folders) are needed only for those
inputs, and their absence is one line that names the extra to install.
"""

from __future__ import annotations

import itertools
import mmap
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hyperlaunch.core.errors import DataError

FILE_KINDS = {".txt": "txt", ".jsonl": "jsonl", ".parquet": "parquet"}
HF_DATASET = "hf-dataset"
_HF_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")
DATA_EXTRA_HINT = "pip install 'hyperlaunch[data]'"
_NON_SPACE = re.compile(rb"\S")


@dataclass(frozen=True)
class Source:
    """One input: a file, or a `save_to_disk` folder (its size and newest mtime over its files)."""

    path: str
    """Absolute (as given, symlinks kept: error messages name the path the user wrote)."""
    kind: str
    """txt, jsonl, parquet or hf-dataset."""
    size: int
    mtime_ns: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Unit:
    """Documents [start, stop) of one source, counted in bytes (.txt, .jsonl), row groups
    (.parquet) or rows (datasets); `lines` marks a .txt file of one document per line."""

    source: int
    start: int
    stop: int
    lines: bool = False

    def as_list(self) -> list[int]:
        return [self.source, self.start, self.stop, int(self.lines)]

    @classmethod
    def from_list(cls, values: Sequence[int]) -> Unit:
        return cls(source=int(values[0]), start=int(values[1]), stop=int(values[2]), lines=bool(values[3]))


def is_hf_dataset(folder: Path) -> bool:
    return any((folder / marker).is_file() for marker in _HF_MARKERS)


def find_sources(inputs: Sequence[Path]) -> list[Source]:
    """Every input file, in the order given; a folder's files sorted by path (hidden ones
    skipped), a `save_to_disk` folder as one source."""
    found: list[Source] = []
    for given in inputs:
        path = Path(os.path.abspath(Path(given).expanduser()))
        if not path.exists():
            raise DataError(f"{given}: no such file or directory")
        if path.is_dir():
            folder = _folder_sources(path)
            if not folder:
                raise DataError(f"{given}: no .txt, .jsonl or .parquet files and not a save_to_disk dataset")
            found.extend(folder)
        elif path.suffix in FILE_KINDS:
            found.append(_file_source(path, FILE_KINDS[path.suffix]))
        else:
            raise DataError(f"{given}: expected a .txt, .jsonl or .parquet file, a folder of them, or a save_to_disk dataset")
    return found


def _file_source(path: Path, kind: str) -> Source:
    st = path.stat()
    return Source(path=str(path), kind=kind, size=st.st_size, mtime_ns=st.st_mtime_ns)


def _folder_sources(root: Path) -> list[Source]:
    if is_hf_dataset(root):
        return [_dataset_source(root)]
    found = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in list(dirs):
            if is_hf_dataset(here / name):
                dirs.remove(name)
                found.append(_dataset_source(here / name))
        found.extend(
            _file_source(here / name, FILE_KINDS[Path(name).suffix])
            for name in files
            if not name.startswith(".") and Path(name).suffix in FILE_KINDS
        )
    return sorted(found, key=lambda source: source.path)


def _dataset_source(folder: Path) -> Source:
    size, newest = 0, 0
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            st = path.stat()
            size, newest = size + st.st_size, max(newest, st.st_mtime_ns)
    return Source(path=str(folder), kind=HF_DATASET, size=size, mtime_ns=newest)


# -- units --------------------------------------------------------------------------------------


def plan_units(sources: Sequence[Source], text_field: str, target_bytes: int) -> list[Unit]:
    """Each source cut into units of about `target_bytes` of input."""
    units: list[Unit] = []
    for index, source in enumerate(sources):
        if source.kind == "txt":
            lines = not _has_paragraphs(source)
            units += _byte_units(index, source, b"\n" if lines else b"\n\n", target_bytes, lines)
        elif source.kind == "jsonl":
            units += _byte_units(index, source, b"\n", target_bytes, False)
        elif source.kind == "parquet":
            units += _parquet_units(index, source, text_field, target_bytes)
        else:
            units += _dataset_units(index, source, text_field, target_bytes)
    return units


@contextmanager
def _mapped(path: str) -> Iterator[Any]:
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield mapped


def _has_paragraphs(source: Source) -> bool:
    """Whether a blank line separates two parts holding text (else: one document per line).
    Stops at the first such blank line, so it reads little of a file of paragraphs."""
    with _mapped(source.path) as data:
        first = _NON_SPACE.search(data)
        if first is None:
            return False
        blank = data.find(b"\n\n", first.start())
        return blank >= 0 and _NON_SPACE.search(data, blank + 2) is not None


def _byte_units(index: int, source: Source, separator: bytes, target: int, lines: bool) -> list[Unit]:
    bounds = [0]
    with _mapped(source.path) as data:
        size = len(data)
        while bounds[-1] + target < size:
            found = data.find(separator, bounds[-1] + target)
            if found < 0 or found + len(separator) >= size:
                break
            bounds.append(found + len(separator))
        bounds.append(size)
    return [Unit(index, start, stop, lines) for start, stop in itertools.pairwise(bounds) if stop > start]


def _parquet_units(index: int, source: Source, text_field: str, target: int) -> list[Unit]:
    parquet = _parquet_file(source.path)
    _check_column(source, text_field, parquet.schema_arrow.names)
    meta = parquet.metadata
    units, start, size = [], 0, 0
    for group in range(meta.num_row_groups):
        size += meta.row_group(group).total_byte_size
        if size >= target:
            units.append(Unit(index, start, group + 1))
            start, size = group + 1, 0
    if start < meta.num_row_groups:
        units.append(Unit(index, start, meta.num_row_groups))
    return units


def _dataset_units(index: int, source: Source, text_field: str, target: int) -> list[Unit]:
    dataset = _load_dataset(source.path)
    _check_column(source, text_field, dataset.column_names)
    rows = dataset.num_rows
    if rows == 0:
        return []
    per_row = max(1.0, dataset.data.column(text_field).nbytes / rows)
    step = max(1, int(target / per_row))
    return [Unit(index, start, min(start + step, rows)) for start in range(0, rows, step)]


def _check_column(source: Source, text_field: str, columns: Sequence[str]) -> None:
    if text_field not in columns:
        raise DataError(f"{source.path}: no column {text_field!r} (see --text-field); columns: {', '.join(columns)}")


# -- reading ------------------------------------------------------------------------------------


def read_unit(source: Source, unit: Unit, text_field: str) -> list[str]:
    """The documents of one unit, in order."""
    if source.kind in ("txt", "jsonl"):
        with _mapped(source.path) as data:
            raw = bytes(data[unit.start : unit.stop])
        text = raw.decode("utf-8", errors="replace")
        if source.kind == "jsonl":
            return _jsonl_documents(source, unit, text, text_field)
        if unit.lines:
            return [line for line in text.splitlines() if line.strip()]
        return [doc.strip() for doc in text.split("\n\n") if doc.strip()]
    if source.kind == "parquet":
        table = _parquet_file(source.path).read_row_groups(list(range(unit.start, unit.stop)), columns=[text_field])
        first_row = sum(_parquet_file(source.path).metadata.row_group(g).num_rows for g in range(unit.start))
        return _strings(source, table.column(text_field).to_pylist(), text_field, first_row)
    dataset = _load_dataset(source.path).select_columns([text_field])
    return _strings(source, dataset[unit.start : unit.stop][text_field], text_field, unit.start)


def _jsonl_documents(source: Source, unit: Unit, text: str, text_field: str) -> list[str]:
    import json

    docs = []
    for number, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise DataError(f"{source.path}:{_line_number(source, unit, number)}: not valid JSON") from None
        if not isinstance(row, dict) or not isinstance(row.get(text_field), str):
            where = f"{source.path}:{_line_number(source, unit, number)}"
            raise DataError(f"{where}: no string field {text_field!r} (see --text-field)")
        docs.append(row[text_field])
    return docs


def _line_number(source: Source, unit: Unit, index_in_unit: int) -> int:
    """1-based line number in the file (counted only when there is an error to report)."""
    with _mapped(source.path) as data:
        before = bytes(data[: unit.start]).count(b"\n")
    return before + index_in_unit + 1


def _strings(source: Source, values: list[Any], text_field: str, first_row: int) -> list[str]:
    for offset, value in enumerate(values):
        if not isinstance(value, str):
            raise DataError(f"{source.path}: row {first_row + offset}: {text_field!r} is not a string")
    return values


_OPENED: dict[str, Any] = {}
"""Parquet files and datasets a process has opened (worker processes read many units of each)."""


def _parquet_file(path: str) -> Any:
    if path not in _OPENED:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataError(f"{path} is a .parquet file, but pyarrow is not installed", hint=DATA_EXTRA_HINT) from None
        _OPENED[path] = pq.ParquetFile(path)
    return _OPENED[path]


def _load_dataset(path: str) -> Any:
    if path not in _OPENED:
        try:
            import datasets
        except ImportError:
            raise DataError(
                f"{path} is a Hugging Face save_to_disk dataset, but the datasets package is not installed",
                hint=DATA_EXTRA_HINT,
            ) from None
        loaded = datasets.load_from_disk(path)
        if isinstance(loaded, datasets.DatasetDict):
            loaded = loaded["train"] if "train" in loaded else next(iter(loaded.values()))
        _OPENED[path] = loaded
    return _OPENED[path]
