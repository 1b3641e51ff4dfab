"""Benchmarks: commands that print figures. Tests never assert timings."""
