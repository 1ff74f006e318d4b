"""The write_shards stage: ``stage.py`` holds its hooks; ``python -m hpc_jobs.write_shards`` runs it."""
