"""The export job: ``job.py`` holds it; ``python -m hpc_jobs.export`` runs it."""
