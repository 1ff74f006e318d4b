"""Versions: a selection of a build's stored documents, made from the metadata table alone.

A version is a directory of bitmaps over its build's shards and a manifest whose id covers the
selection and the shards' digests, never where the build lies. ``open`` opens one (what the loader
reads), ``query`` runs a selection as SQL, ``buckets`` assigns buckets by predicate, ``write`` writes a
version, ``plan`` plans and makes one, ``diff`` compares two. See docs/versions.md.
"""
