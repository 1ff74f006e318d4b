"""The annotate stage: ``stage.py`` holds its hooks; ``python -m hpc_jobs.annotate`` runs it."""
