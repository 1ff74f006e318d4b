"""The on-disk formats, one module each with its reader and writer side by side: document shards and
records files (``docshard``), Megatron ``.bin/.idx`` (``megatron``), the snapshot's doc_id index
(``doc_index``), the per-document metadata Parquet (``metadata``), Bloom filters (``bloom``), the
persistent dedup index (``dedup_index`` with ``dedup_keys``, ``dedup_files``, ``dedup_write`` and
``dedup_probe``) and the range partitioning they share (``partitions``)."""
