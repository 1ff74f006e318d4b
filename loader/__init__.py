"""The training-time data loader: a snapshot's tokens for N data-parallel ranks, resumable anywhere.

``SnapshotLoader`` (a torch ``IterableDataset``) composes the pure sampler (:mod:`loader.sampler`), the
consumption record (:mod:`loader.state`), sequence packing (:mod:`loader.sequences`), fault handling
(:mod:`loader.faults`) and a recipe's phase clock (:mod:`loader.phases`); :mod:`loader.world` is the only
place that reads the launcher's environment. :mod:`loader.counter` checks the realized mixture online;
:mod:`loader.trace` positions a loader at a step of a run so that it names the source of every token
of that step's batch (:mod:`loader.provenance`), for ``corpus trace``. :mod:`loader.prefetch` reads the
next steps in a background thread; :mod:`loader.metrics` says what reading cost; :mod:`loader.shuffle`
reads each shard's documents in a keyed order within windows (the shuffle buffer).
"""

from loader.counter import MixtureCounter, MixtureDrift
from loader.dataset import ResumeRefused, SnapshotLoader
from loader.faults import ShardUnavailable, TooManyCorruptShards
from loader.manifest import load_manifest, natural_mixture
from loader.sampler import SAMPLER_VERSION
from loader.world import World

__all__ = [
    "SnapshotLoader",
    "ResumeRefused",
    "ShardUnavailable",
    "TooManyCorruptShards",
    "World",
    "SAMPLER_VERSION",
    "load_manifest",
    "natural_mixture",
    "MixtureCounter",
    "MixtureDrift",
]
