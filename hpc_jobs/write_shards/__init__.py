"""The write_shards stage: ``stage.py`` holds its hooks, one module per collective step;
``python -m hpc_jobs.write_shards`` runs it."""
