"""The ingest stage's configuration (``[ingest]``): docs/ingest-and-filters.md, "ingest"."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corpus.code.archive import ArchiveLimits
from corpus.code.rules import build_rules
from corpus.text.sources import UNDECLARED_CHOICES, parse_source_tables
from runtime.global_phase import PART_ROWS


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    sources: list[dict[str, Any]] = field(
        default_factory=list
    )  # [[ingest.sources]] match/name/tier/license/date/kind/url/fields
    holdout_modulus: int = 1000  # hash(normalized url) % modulus == 0 -> eval holdout; 0 disables
    holdout_tiers: list[str] = field(default_factory=lambda: ["web", "known_good_web"])
    collapse_recrawls: bool = True
    #: WARC records declared larger, JSONL lines and text files longer are quarantined (digested, never held)
    max_record_bytes: int = 64 << 20
    max_decoded_bytes: int = 2_000_000  # a Content-Encoded page decoding to more is quarantined
    #: a gzipped WARC larger than this is cut into units of about this size at record boundaries
    #: (corpus.text.warc_units), dealt to every rank like files; 0: a file is one unit
    unit_bytes: int = 64 << 20
    #: small files are read in bundles of consecutive files of about this many bytes, so each stage's
    #: cost per unit (its shard files, a stats record, a part of each global phase) is paid per bundle,
    #: not per file (hpc_jobs.ingest.bundles); 0: a file is one unit
    bundle_bytes: int = 64 << 20
    #: but never fewer units than this: a listing of at most this many units is read a unit per file
    bundle_min_units: int = 256
    #: a JSONL/text/Parquet file neither [[ingest.sources]] nor a corpus-sources.toml declares: tier and
    #: source "web" (the default: trust is declared, never inferred from a format), "curated", or "refuse"
    undeclared_files: str = "web"
    #: wall-clock seconds one input (a file, a unit of a large WARC, a repository) may take to read;
    #: the rest of an input that takes longer is quarantined as input_timeout (runtime.input_deadline); 0: none
    max_input_seconds: float = 1800.0
    #: fetches a groups part of the recrawl collapse is sized for: the parts are a function of the
    #: crawl's size, never of how many files it came in
    part_rows: int = PART_ROWS
    # -- code repositories (corpus.code, docs/code.md) --
    #: the team's file rules (tables: reason, path, min_bytes, header, line statistics), checked first
    code_rules: list[dict[str, Any]] = field(default_factory=list)
    code_builtin_rules: bool = True  # then corpus.code.rules.BUILTIN_RULES
    max_file_bytes: int = 1_000_000  # a repository file over this is rejected as too_large, never read
    max_doc_tokens: int = 32_768  # a repository's document holds whole files up to this estimate
    bytes_per_token: float = 3.0  # the estimate: UTF-8 bytes / this (GPT-NeoX on the shared code: 3.1-3.5)
    #: a repository over any of these is quarantined: decompressed bytes (a tar: its whole stream),
    #: entries, and decompressed bytes per stored byte past 64 MiB (corpus.code.archive.ArchiveLimits)
    max_archive_bytes: int = 1 << 30
    max_archive_members: int = 100_000
    max_archive_ratio: int = 100

    def __post_init__(self) -> None:
        parse_source_tables(self.sources)  # a ValueError here is reported as a config error
        build_rules(self.code_rules, self.code_builtin_rules)
        if self.max_file_bytes <= 0 or self.max_doc_tokens <= 0 or self.bytes_per_token <= 0:
            raise ValueError("max_file_bytes, max_doc_tokens and bytes_per_token must be positive")
        if min(self.max_decoded_bytes, self.max_record_bytes) <= 0:
            raise ValueError("max_decoded_bytes and max_record_bytes must be positive")
        if min(self.max_archive_bytes, self.max_archive_members, self.max_archive_ratio) <= 0:
            raise ValueError("max_archive_bytes, max_archive_members and max_archive_ratio must be positive")
        if self.max_input_seconds < 0:
            raise ValueError("max_input_seconds must be 0 (no bound) or positive")
        if self.bundle_bytes < 0 or self.bundle_min_units < 1:
            raise ValueError("bundle_bytes must be 0 (no bundles) or positive, bundle_min_units at least 1")
        if self.part_rows < 1:
            raise ValueError("part_rows must be at least 1")
        if self.undeclared_files not in UNDECLARED_CHOICES:
            raise ValueError(f"undeclared_files must be one of {', '.join(UNDECLARED_CHOICES)}")

    def archive_limits(self) -> ArchiveLimits:
        return ArchiveLimits(self.max_archive_bytes, self.max_archive_members, self.max_archive_ratio)
