"""The immutable snapshot of a build: its stored candidates, self-contained and content-addressed.

``layout`` names its artifacts, ``assembly`` lays it out from the finished stages (``inherit``: a delta's
base, by reference), ``lookup`` opens one by path or id and answers by its indexes, ``validate`` checks
the files against the manifest. See docs/snapshot.md ("The snapshot").
"""
