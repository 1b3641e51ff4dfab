"""Runs torchtitan's own training entry point under torchrun, with its metric records copied
to a JSON-lines file: `torchrun ... -m hyperlaunch.bench.torchtitan_entry RECORDS -- ARGS`.

torchtitan logs each step's figures (throughput(tps), mfu(%), memory/max_active(GiB), ...)
through its metric loggers; with TensorBoard and W&B off, that is a logger whose `log` does
nothing. Its `log` is replaced here by one that also writes the figures, so `bench gpu
--against torchtitan` reads torchtitan's numbers from torchtitan, not from its console text.
Nothing else of torchtitan is touched."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _record_to(path: Path) -> None:
    from torchtitan.components import metrics

    def log(self: Any, values: dict[str, Any], step: int) -> None:  # noqa: ARG001 - torchtitan's signature
        with path.open("a") as out:
            out.write(json.dumps({"step": step, **{k: float(v) for k, v in values.items()}}) + "\n")

    # Every logger class torchtitan may hand back gets it: the figures are written once per
    # step whichever it chose (a reader keeps the last record of each step).
    metrics.BaseLogger.log = log
    metrics.LoggerContainer.log = log


def main(argv: list[str]) -> int:
    records, separator, args = argv[0], argv[1], argv[2:]
    assert separator == "--", "usage: torchtitan_entry RECORDS -- TORCHTITAN_ARGS"
    # Before any torchtitan import: 0.2's parser takes sys.argv[1:] as a default bound at import.
    sys.argv = ["torchtitan.train", *args]
    _record_to(Path(records))
    from torchtitan import train

    if hasattr(train, "Trainer") and train.main.__code__.co_argcount == 1:  # 0.2.x: main(trainer_class)
        train.main(train.Trainer)
    else:  # 0.3 and later: main() builds the trainer from its config
        train.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
