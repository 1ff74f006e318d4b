"""The version job: ``job.py`` holds it; ``python -m hpc_jobs.version`` runs it."""
