"""A submitted job's life: its records, the launch path, the guard against a second live job, status and attempts."""
