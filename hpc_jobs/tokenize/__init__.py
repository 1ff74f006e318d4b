"""The tokenize stage: ``stage.py`` holds its hooks; ``python -m hpc_jobs.tokenize`` runs it."""
