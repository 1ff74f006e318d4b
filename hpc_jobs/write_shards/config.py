"""The write_shards stage's configuration (``[write_shards]``): docs/snapshot.md, "Configuration"."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class WriteShardsConfig:
    seed: int = 0  # the build's seed unless set here
    shard_target_tokens: int = 1 << 24
    bucket_of_source: dict[str, str] = field(default_factory=dict)  # source -> bucket; default source_tier
    max_repeat_run: int = 1024  # longest run of one token id a shard may hold
    min_entropy_bits: float = 5.0  # unigram entropy of the shard's non-EOS tokens (compared in millibits)
    max_top_token_share: float = 0.25  # share of the most frequent non-EOS token
    #: about how many documents one part of the doc_id index holds (40 bytes each); the number of parts
    #: follows from the data and this, never from the rank count
    doc_index_part_docs: int = 1 << 20
