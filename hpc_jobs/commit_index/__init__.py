"""The commit_index job: ``job.py`` holds it; ``python -m hpc_jobs.commit_index`` runs it."""
