"""hyperlaunch: FSDP2 training on Slurm, launched, watched and resumed by one tool."""

__version__ = "0.1.0"
