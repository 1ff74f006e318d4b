"""Deduplication logic shared by the exact, line-level and MinHash stages (pure functions, no MPI).

The stages in ``hpc_jobs`` do the I/O and the collective exchanges; what counts as "the same text",
who wins when documents collide and which candidate pairs are trusted is decided here.
"""
