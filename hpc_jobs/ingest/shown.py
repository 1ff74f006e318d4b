"""What ingest records of an input whose name is not UTF-8: the name's display form, never its bytes.

The readers open an input by its path as the OS gave it (surrogate escapes for the bytes that are not
UTF-8) and put its name into what they record: a curated record's URL, a repository's name and URL, a
quarantine record's ``input_name`` and detail. Those are written as UTF-8 JSON, where a surrogate
cannot go, so they carry :func:`corpus.text.inputs.display_name` instead (``\\xNN`` per byte). A
document's text and digests never hold a file name and are left as read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from corpus.text.inputs import display_name
from hpc_jobs.ingest.items import Item


def shown_item(it: Item) -> Item:
    """``it`` with the URL of its document, or the names in its quarantine record, in display form."""
    if it.doc is not None:
        return replace(it, doc=replace(it.doc, url=display_name(it.doc.url)))
    if it.bad is not None:
        bad = it.bad
        return replace(
            it,
            bad=replace(
                bad,
                source=display_name(bad.source),
                url=display_name(bad.url),
                detail=display_name(bad.detail),
                input_name=display_name(bad.input_name),
            ),
        )
    return it


def shown_files(value: Any) -> Any:
    """A repository's file fates (JSON-shaped: dicts, lists, strings) with every string shown."""
    if isinstance(value, str):
        return display_name(value)
    if isinstance(value, dict):
        return {shown_files(k): shown_files(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shown_files(v) for v in value]
    return value
