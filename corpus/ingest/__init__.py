"""Reading raw inputs into documents: WARC/ARC crawls, curated JSONL and text, the eval holdout and
recrawl collapse. The ``ingest`` stage (``hpc_jobs/ingest.py``) composes these."""
