"""What a training script calls inside a hyperlaunch job (see the package docstring once it has one)."""
