"""The extract stage: ``stage.py`` holds its hooks; ``python -m hpc_jobs.extract`` runs it."""
