"""Decontamination: eval sets are found in training text by word 13-grams and reported per benchmark.

``registry`` reads the benchmark files, ``ngrams`` normalizes text and hashes word n-grams,
``matcher`` holds the eval-side index and the matching rule, ``corpus_index`` the corpus-side index
retained with a snapshot, and ``report`` the per-benchmark contamination report.
"""
