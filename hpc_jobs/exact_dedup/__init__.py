"""The exact_dedup stage: ``stage.py`` holds its hooks; ``python -m hpc_jobs.exact_dedup`` runs it."""
