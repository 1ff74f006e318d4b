"""The decontaminate stage: ``stage.py`` holds its hooks; ``python -m hpc_jobs.decontaminate`` runs it."""
