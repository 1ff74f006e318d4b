"""Small input files read as bundles of a useful size, so a crawl's cost does not grow with its files.

Every stage pays per unit of work: its documents, filtered and quarantine files with their sidecars, a
stats record, a part of each global phase, and a marker for each. A crawl delivered as 10^5 small
files would pay that 10^5 times in every stage, so ingest reads runs of consecutive files (listing
order) as one unit of about ``bundle_bytes``, and every later stage inherits its shards. The bundles are
a pure function of the listing (the files in order and their sizes), never of the rank count; a listing
of at most ``bundle_min_units`` units, a repository and a piece of a large WARC are read as before.
A record's key in the recrawl decisions is its file's place in the bundle and its position in the file.
"""

from __future__ import annotations

from runtime.input_shard import InputShard, bundle


def bundled(units: list[InputShard], bundle_bytes: int, min_units: int) -> list[InputShard]:
    """``units`` with runs of consecutive small files as bundles of about ``bundle_bytes`` (fewer bytes
    where the files hold less than ``min_units`` bundles of it); a file at least that large, a
    repository directory and a piece of a file stay units of their own."""
    if bundle_bytes == 0 or len(units) <= min_units:
        return units
    weights = [u.weight if _bundleable(u) else None for u in units]  # None: a unit of its own
    loose = [w for w in weights if w is not None]
    if len(loose) < 2:
        return units
    target = min(bundle_bytes, -(-sum(loose) // min_units))
    out: list[InputShard] = []
    run: list[InputShard] = []
    size = 0
    for u, weight in zip(units, weights, strict=True):
        if weight is None or weight >= target:
            out.append(u)
            continue
        if run and size + weight > target:
            out.append(bundle(run))
            run, size = [], 0
        run.append(u)
        size += weight
    if run:
        out.append(bundle(run))
    return out


def _bundleable(unit: InputShard) -> bool:
    """A whole regular file (not a piece of one, a repository directory or a bundle)."""
    return unit.span is None and not unit.members and not unit.path.is_dir()


def key_prefixes(unit: InputShard) -> list[tuple[str, InputShard]]:
    """Each file of a unit with the prefix of its records' keys in the unit's recrawl decisions: its
    place in a bundle (``"3:"``), nothing for a unit that is one file (keys as they always were)."""
    if not unit.members:
        return [("", unit)]
    return [(f"{k}:", f) for k, f in enumerate(unit.members)]
