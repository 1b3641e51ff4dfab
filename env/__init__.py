"""EFA/NCCL environment presets per instance type, shipped as package data."""
