"""A sweep: one training per point of a grid of trainer options, run as one Slurm job array.

The rules live here, pure: the grid (`--grid lr=1e-4,3e-4`, or a TOML file), its elements in a
fixed order (the first key varies slowest, as itertools.product), each element's name
(`qwen3_0_6b-lr3e-4-seed1`: its checkpoints `<name>-<N>steps`, its pointer `<name>-latest`)
and its JobSpec (its own run folder, the grid's flags after the job's trainer arguments), and
the `--array` value of the elements one submission runs."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperlaunch.core.compat import tomllib
from hyperlaunch.core.errors import InvalidInput
from hyperlaunch.job import trainer_args as targs
from hyperlaunch.job.defaults import job_spec, tensorboard_dir
from hyperlaunch.job.spec import JobSpec

MAX_ELEMENTS = 1000
"""Slurm's default MaxArraySize is 1001 (indices 0-1000); a larger sweep is several sweeps."""
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_NOT_GRIDDED = (*targs.SPEC_OWNED, targs.MODEL_NAME, *targs.RESUME_OVERRIDES, *targs.HELP_FLAGS)
"""Trainer flags a grid may not vary: the job's own settings, the element's name, where it starts."""

Grid = tuple[tuple[str, tuple[str, ...]], ...]
"""(key, values) in the order given: `--grid lr=1e-4,3e-4` is ("lr", ("1e-4", "3e-4"))."""


@dataclass(frozen=True)
class Element:
    """One training of the sweep: its array index and the grid's value of each key."""

    index: int
    values: tuple[tuple[str, str], ...]
    tracker_run_id: str | None = None
    """Chosen at submit with --tracker: the element's own run (see JobSpec.tracker_run_id)."""
    mlflow_run_id: str | None = None
    mlflow_experiment_id: str | None = None

    @property
    def suffix(self) -> str:
        """`lr3e-4-seed1`: the element's part of its name, characters a file name should not
        hold replaced by '_'."""
        return "-".join(_NAME_UNSAFE.sub("_", f"{key}{value}") for key, value in self.values)

    @property
    def flags(self) -> tuple[str, ...]:
        """The element's trainer options: `--lr 3e-4 --seed 1`."""
        return tuple(word for key, value in self.values for word in (f"--{key}", value))


@dataclass(frozen=True)
class Sweep:
    """A submitted sweep: all its elements, and which of them this array job runs."""

    elements: tuple[Element, ...]
    runs: tuple[int, ...]
    """The array indices this job runs: all of them, or the ones `resume` submits again."""
    max_parallel: int | None = None
    """At most this many elements run at once (`--array=...%N`)."""

    @property
    def array(self) -> str:
        """sbatch's --array value: `0-5%2`, or `1,3` for some of them."""
        return array_value(self.runs, self.max_parallel)

    def element(self, index: int) -> Element:
        for element in self.elements:
            if element.index == index:
                return element
        raise InvalidInput(f"the sweep has no element {index}; its elements are 0-{len(self.elements) - 1}")


def parse_grid(texts: Sequence[str], *, script_job: bool = False) -> Grid:
    """`--grid KEY=V1,V2` flags as a Grid. A key is a trainer option's name without its
    dashes (a --script job's own option); each value is passed as written."""
    grid: list[tuple[str, tuple[str, ...]]] = []
    for text in texts:
        key, sep, listed = text.partition("=")
        if not sep:
            raise InvalidInput(f"--grid {text!r}: write KEY=V1,V2,... (e.g. --grid lr=1e-4,3e-4)")
        values = tuple(value.strip() for value in listed.split(","))
        grid.append((key.strip(), values))
    return checked_grid(grid, "--grid", script_job=script_job)


def read_grid_file(path: Path, *, script_job: bool = False) -> Grid:
    """A TOML grid file: a `[grid]` table of arrays, `lr = ["1e-4", "3e-4"]`, `seed = [1, 2]`
    (numbers as TOML writes them back: quote a value to keep its spelling)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput(f"--grid-file {path}: cannot read it: {getattr(err, 'strerror', None) or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise InvalidInput(f"--grid-file {path}: not TOML: {err}") from None
    table = data.get("grid")
    unknown = sorted(set(data) - {"grid"})
    if not isinstance(table, dict) or unknown:
        raise InvalidInput(f"--grid-file {path}: expected only a [grid] table of KEY = [V1, V2] arrays" + (f", found {', '.join(unknown)}" if unknown else ""))
    grid = []
    for key, listed in table.items():
        if not isinstance(listed, list) or not all(isinstance(v, (str, int, float)) for v in listed):
            raise InvalidInput(f"--grid-file {path}: {key} must be an array of numbers or strings, e.g. {key} = [1, 2]")
        grid.append((key, tuple(_toml_text(v) for v in listed)))
    return checked_grid(grid, f"--grid-file {path}:", script_job=script_job)


def _toml_text(value: str | int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value)


def checked_grid(grid: Iterable[tuple[str, tuple[str, ...]]], where: str, *, script_job: bool = False) -> Grid:
    """The grid when every key is an option name given once, with values that are non-empty
    and distinct, and the product is at most MAX_ELEMENTS; InvalidInput naming what is wrong."""
    seen: set[str] = set()
    checked = []
    for key, values in grid:
        if not _KEY.fullmatch(key):
            raise InvalidInput(f"{where} key {key!r}: a trainer option's name without its dashes, e.g. lr or warmup-steps")
        if key in seen:
            raise InvalidInput(f"{where} key {key} is given twice; list all its values once: {key}=V1,V2")
        if not script_job and f"--{key}" in _NOT_GRIDDED:
            raise InvalidInput(
                f"{where} key {key}: --{key} is set by hyperlaunch for the whole sweep, not per element; "
                "grid over trainer options such as lr, seed or warmup-steps"
            )
        if not values or any(not value for value in values):
            raise InvalidInput(f"{where} {key} has an empty value; write {key}=V1,V2 with no empty one")
        if len(set(values)) != len(values):
            raise InvalidInput(f"{where} {key} lists a value twice")
        seen.add(key)
        checked.append((key, tuple(values)))
    if not checked:
        raise InvalidInput("a sweep needs a grid: --grid KEY=V1,V2 (repeatable) or --grid-file FILE")
    count = 1
    for _, values in checked:
        count *= len(values)
    if count > MAX_ELEMENTS:
        raise InvalidInput(f"the grid has {count:,} elements; a sweep runs at most {MAX_ELEMENTS:,} (Slurm's default MaxArraySize)")
    return tuple(checked)


def elements(grid: Grid) -> tuple[Element, ...]:
    """Every point of the grid, the first key varying slowest."""
    keys = [key for key, _ in grid]
    return tuple(
        Element(index, tuple(zip(keys, combination, strict=True)))
        for index, combination in enumerate(itertools.product(*(values for _, values in grid)))
    )


def element_name(base: JobSpec, element: Element) -> str:
    """`<model or run name>-<suffix>`: the element's checkpoint name."""
    return f"{base.derived.checkpoint_name}-{element.suffix}"


def element_spec(base: JobSpec, element: Element) -> JobSpec:
    """The JobSpec of one element: the sweep's job with the element's options after its
    trainer arguments (so they win), its own name (the bundled trainer's --model-name, a
    script job's --name), run folder `<run dir>/<suffix>` and tracker run. Its Slurm job name
    stays the sweep's (every element's log is `<job name>_<its job id>.out`)."""
    name = element_name(base, element)
    changes: dict[str, object] = {
        "run_dir": os.path.join(base.output.run_dir, element.suffix),
        "checkpoint_name": "",
        "trainer_args": (*base.job.trainer_args, *element.flags) if base.is_script_job else (*base.job.trainer_args, *element.flags, targs.MODEL_NAME, name),
        "tracker_run_id": element.tracker_run_id,
        "mlflow_run_id": element.mlflow_run_id,
        "mlflow_experiment_id": element.mlflow_experiment_id,
    }
    if base.is_script_job:
        changes["name"] = name
    if base.output.tensorboard_dir is not None:
        derived = tensorboard_dir(base.output.run_dir)
        changes["tensorboard_dir"] = None if base.output.tensorboard_dir == derived else os.path.join(base.output.tensorboard_dir, element.suffix)
    # Its checkpoint name (and a derived TensorBoard folder) decided again, as the plan decides them.
    return job_spec(**{**base.to_flat(), **changes}).settled()


def unique_names(base: JobSpec, members: Sequence[Element]) -> None:
    """Refuse a grid whose values differ only in characters a name cannot hold (`a/b`, `a:b`):
    two elements would share a checkpoint pointer."""
    seen: dict[str, Element] = {}
    for element in members:
        name = element_name(base, element)
        if name in seen:
            raise InvalidInput(f"grid elements {seen[name].index} and {element.index} would both be named {name}; make their values differ in letters or digits")
        seen[name] = element


def array_value(indices: Sequence[int], max_parallel: int | None) -> str:
    """`0-5`, `1,3,7-9`, with `%N` for at most N at once."""
    ordered = sorted(set(indices))
    parts: list[str] = []
    start = previous = ordered[0]
    for index in [*ordered[1:], None]:
        if index is not None and index == previous + 1:
            previous = index
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if index is not None:
            start = previous = index
    return ",".join(parts) + (f"%{max_parallel}" if max_parallel else "")


def parse_element_id(text: str) -> tuple[str, int | None]:
    """`123_4` -> ("123", 4); `123` -> ("123", None)."""
    head, sep, tail = text.partition("_")
    return (head, int(tail)) if sep and tail.isdigit() else (text, None)


def sweep_to_json(sweep: Sweep) -> dict[str, object]:
    return {
        "elements": [
            {
                "index": e.index, "values": [list(pair) for pair in e.values], "tracker_run_id": e.tracker_run_id,
                "mlflow_run_id": e.mlflow_run_id, "mlflow_experiment_id": e.mlflow_experiment_id,
            }
            for e in sweep.elements
        ],
        "runs": list(sweep.runs),
        "max_parallel": sweep.max_parallel,
    }


def sweep_from_json(data: object) -> Sweep:
    """The sweep of a job record; ValueError says why it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("elements"), list) or not isinstance(data.get("runs"), list):
        raise ValueError("sweep must be an object with elements and runs")
    members = []
    for item in data["elements"]:
        if not isinstance(item, dict) or not _is_index(item.get("index")) or not isinstance(item.get("values"), list):
            raise ValueError("a sweep element must have an index and values")
        values = item["values"]
        if not all(isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, str) for v in pair) for pair in values):
            raise ValueError("a sweep element's values must be [key, value] pairs of text")
        ids = {name: item.get(name) for name in ("tracker_run_id", "mlflow_run_id", "mlflow_experiment_id")}
        if not all(isinstance(v, (str, type(None))) for v in ids.values()):
            raise ValueError("a sweep element's run ids must be text or null")
        members.append(Element(item["index"], tuple((k, v) for k, v in values), **ids))
    runs, parallel = data["runs"], data.get("max_parallel")
    indices = {e.index for e in members}
    if not runs or not all(_is_index(i) and i in indices for i in runs):
        raise ValueError("a sweep's runs must be indices of its elements")
    if parallel is not None and not (_is_index(parallel) and parallel >= 1):
        raise ValueError("max_parallel must be a positive whole number or null")
    return Sweep(tuple(members), tuple(runs), parallel)


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
