"""Jinja sbatch templates, shipped as package data."""
