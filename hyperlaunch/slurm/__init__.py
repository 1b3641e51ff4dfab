"""The only code that runs Slurm commands: the commands, which cluster they talk to, host lists."""
