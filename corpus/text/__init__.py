"""Text in: raw inputs read into documents (WARC/ARC crawls, curated JSONL and text, content encodings,
the source of an input file), HTML extraction, normalization for dedup keys, and the pinned tokenizer."""
