"""The ingest stage: ``stage.py`` holds its hooks; ``python -m hpc_jobs.ingest`` runs it."""
