"""The data card of a build or snapshot (``corpus report``) and the comparison of two (``corpus diff``).

``build_view`` reads what a build left on disk, ``scan`` streams shards once for what manifests do not
record, ``gather`` turns both into the card's numbers (a JSON-able dict), ``html`` and ``plots`` render
that dict, and ``diff`` compares two builds. The modules are imported directly; this package
re-exports nothing so that ``corpus.report.alarms`` can use the build view without an import cycle.
"""
