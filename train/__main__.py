"""`python -m hyperlaunch.train` / `torchrun ... -m hyperlaunch.train`."""

from __future__ import annotations

from .train import entry

if __name__ == "__main__":
    entry()
