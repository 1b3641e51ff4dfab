"""One job before it runs: JobSpec, containers, trainer arguments, cluster detection, settings and the plan."""
