"""The FSDP2 training entrypoint that runs on the compute nodes (`python -m hyperlaunch.train`)."""
