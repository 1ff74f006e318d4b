"""The line_dedup stage: ``stage.py`` holds its hooks; ``python -m hpc_jobs.line_dedup`` runs it."""
