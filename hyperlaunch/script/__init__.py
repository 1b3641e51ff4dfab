"""JobSpec to sbatch text, pure: rendering, shell quoting, the compiled-template cache."""
