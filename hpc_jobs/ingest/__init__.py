"""The ingest stage: ``stage.py`` holds its hooks, ``items.py`` reads the inputs, ``recrawl.py`` collapses
recrawls; ``python -m hpc_jobs.ingest`` runs it."""
