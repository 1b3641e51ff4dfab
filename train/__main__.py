"""`python -m hyperlaunch.train` / `torchrun ... -m hyperlaunch.train`."""

from __future__ import annotations

import sys

from .train import main

if __name__ == "__main__":
    sys.exit(main())
