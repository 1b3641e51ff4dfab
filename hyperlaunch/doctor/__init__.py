"""Checks of a cluster and of its compute nodes before a job is submitted."""
