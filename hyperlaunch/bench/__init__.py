"""Benchmarks: commands that print figures (the machine, then median [min - max] of several
runs). Tests never assert timings. `python -m hyperlaunch.bench` lists them."""
