"""The only code that runs Slurm commands, each through runner.run: nodes (sinfo, scontrol, srun),
submission (sbatch, through submitit), queue (squeue, scancel), accounting (sacct, sacctmgr) and
arrays (job arrays' ids and tasks); env says which cluster they talk to, hostlist expands host lists."""
