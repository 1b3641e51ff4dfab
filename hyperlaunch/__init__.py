"""hyperlaunch: FSDP2 training on Slurm, launched, watched and resumed by one tool."""

from pathlib import Path as _Path

__version__ = "0.1.0"

# An installed hyperlaunch holds its trainer, templates and presets inside this package
# (pyproject's package-dir maps the checkout's top-level train/, templates/ and env/ there).
# Imported from a source checkout (python -m from the repository root puts the checkout
# first on sys.path, ahead of the installed package), the same names resolve to the
# checkout's folders beside this one, so `hyperlaunch.train` exists either way.
_here = _Path(__file__).resolve().parent
if not (_here / "train").is_dir() and (_here.parent / "train" / "__main__.py").is_file():
    __path__.append(str(_here.parent))  # noqa: F821
