"""What a version keeps: the selection (one SQL query from a TOML file), the quality policy, buckets by
predicate, licence classes, provenance rules and the training recipe that names versions and buckets."""
