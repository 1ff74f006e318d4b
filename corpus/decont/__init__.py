"""Decontamination: eval items are found in training text by one rule, in the build and after it.

``registry`` reads the benchmark files, ``content`` builds each item's matched passages from its fields
(templates stripped), ``ngrams`` normalizes text and hashes word n-grams, ``rule`` is the rule (one pure
function over a document's 8-gram set), ``matcher`` applies it in the build (the eval-side index),
``doc_grams`` keeps the per-document 8-gram index (the one index a snapshot retains) and applies it
after the build, ``holdout`` the eval holdout of web URLs, and ``report`` the per-benchmark
contamination report.
"""
