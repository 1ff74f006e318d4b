"""The minhash_dedup stage: ``stage.py`` holds its hooks; ``python -m hpc_jobs.minhash_dedup`` runs it."""
