"""Where a snapshot keeps its artifacts, relative to its directory (docs/snapshot.md, "The snapshot").

Assembly writes these paths, lookup and validation read them; the manifest lists each with its sha256.
"""

REPORT = "decont/report.json"
#: exact_dedup's copies/ (one file per input shard with copies), under the same name in the snapshot
COPIES_DIR = "copies"
#: decontaminate's per-document 8-gram index parts (its ``doc_gram_index/``), linked
GRAM_DOCS_DIR = "decont/8gram_docs"
DOC_INDEX_DIR = "lineage/doc_index"
#: the doc_id indexes of the base candidates a delta's candidates inherit (oldest first; each part says
#: which index it belongs to, ``prefix_bits`` lists each index's)
BASE_DOC_INDEX = "base_doc_index"
