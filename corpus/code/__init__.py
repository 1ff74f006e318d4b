"""Code as its own sub-pipeline, input side: repositories (archives or directories) read as whole
units, vendored / generated / minified files and data rejected before anything is hashed, and each
repository's files concatenated into documents in a stated order (docs/code.md)."""
