"""corpus-pipeline: raw crawl and curated sources in, an immutable content-addressed token snapshot out."""

__version__ = "0.1.0"
