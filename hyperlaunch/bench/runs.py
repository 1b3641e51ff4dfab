"""What the training benchmarks share: a torchrun of a module, the records train/ wrote, and
the argument parser every benchmark starts from."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def torchrun(nproc: int, module_args: list[str]) -> str:
    """`torchrun --standalone --nproc-per-node N -m MODULE ARGS`; its stdout, or exit with its stderr."""
    launcher = Path(sys.executable).with_name("torchrun")
    argv = [str(launcher), "--standalone", f"--nproc-per-node={nproc}", "-m", *module_args]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


def records(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    """The run's metrics records of one type ('step' or 'event'), in order."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if row.get("type") == kind]


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog=f"python -m hyperlaunch.bench {name}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
