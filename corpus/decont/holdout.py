"""The eval holdout: a fixed slice of web URLs that never enters the corpus, nor do copies of its pages.

Carved before anything else looks at the data, as a pure function of the normalized URL
(:func:`normalize_url`, ``stable_hash64``), so every build and every rank carves out the same pages
and the spellings of one address are held out together; a URL already in normal form keeps its
verdict across holdout versions. ``extract`` stores the held-out pages extracted and scrubbed (with
their exact key, ``HOLDOUT_EXACT_KEY``); ``exact_dedup`` and ``minhash_dedup`` tag the candidates that
copy one (:data:`EXACT_SCORE`, :data:`NEAR_SCORE`), which the policy's first checks exclude.
:func:`build_holdout` finds it where the build layout puts it. See docs/ingest-and-filters.md
("Eval holdout").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from corpus.formats.docshard import SUFFIX
from corpus.model.annotations import EXTRACT, HOLDOUT_EXACT, HOLDOUT_NEAR
from corpus.model.digest import stable_hash64
from corpus.model.layout import base_chain, build_dir_of_stage, stage_dir
from corpus.model.manifest import read_stage_manifest

HOLDOUT_SALT = "corpus-eval-holdout/1"
#: the carving rule: 1 hashed the raw URL, 2 hashes :func:`normalize_url`'s form (same salt)
HOLDOUT_VERSION = "2"
#: the stage whose ``holdout/`` artifact is the stored eval holdout (extracted, scrubbed)
HOLDOUT_STAGE = EXTRACT
HOLDOUT_KIND = "holdout"
#: the scores of a candidate that copies a held-out page: exact (1.0, exact_dedup) and near (the
#: estimated Jaccard similarity to the closest held-out page, minhash_dedup); each also the name of
#: the annotation that stage writes
EXACT_SCORE = HOLDOUT_EXACT.name
NEAR_SCORE = HOLDOUT_NEAR.name

#: query parameters that track a click, not name a page (compared lower-cased); ``utm_*`` too
TRACKING_PARAMS = frozenset(
    {
        "gclid",
        "gclsrc",
        "dclid",
        "gbraid",
        "wbraid",
        "fbclid",
        "msclkid",
        "yclid",
        "twclid",
        "ttclid",
        "igshid",
        "mc_cid",
        "mc_eid",
        "_ga",
        "_gl",
        "_hsenc",
        "_hsmi",
        "mkt_tok",
    }
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _tracking(name: str) -> bool:
    name = name.lower()
    return name.startswith("utm_") or name in TRACKING_PARAMS


def normalize_url(url: str) -> str:
    """The form of ``url`` the holdout is carved by: scheme and host lower-cased, ``http`` read as
    ``https`` (one page either way), credentials, the default port (80, 443) and the fragment dropped,
    a host's trailing dot dropped, tracking parameters (``utm_*`` and :data:`TRACKING_PARAMS`) removed
    and the others sorted, a trailing ``/`` of a path other than the root removed, an empty path made
    ``/``. Path case and everything else are kept. A URL ``urlsplit`` cannot read is only stripped."""
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    scheme = parts.scheme.lower()
    if not parts.netloc:  # not a network URL (curated://, a bare path): only the fragment goes
        return urlunsplit((scheme, "", parts.path, parts.query, ""))
    host = (parts.hostname or "").rstrip(".")
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    if scheme == "http":
        scheme = "https"
    path = parts.path or "/"
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _tracking(k)]
    return urlunsplit((scheme, host, path, urlencode(sorted(query)), ""))


def in_holdout(url: str, tier: str, modulus: int, tiers: tuple[str, ...] | list[str]) -> bool:
    """``hash(normalize_url(url)) % modulus == 0`` for documents of the web tiers; ``modulus <= 0``
    disables it."""
    return modulus > 0 and tier in tiers and stable_hash64(HOLDOUT_SALT, normalize_url(url)) % modulus == 0


@dataclass(frozen=True)
class HoldoutFile:
    """One file of the stored holdout (a unit of a global phase: name and digest)."""

    name: str
    path: Path
    sha256: str
    records: int


class HoldoutMissing(ValueError):
    """A build's stage reads candidates, but the build's stored eval holdout is not complete."""


def build_holdout(input_dir: Path) -> list[HoldoutFile]:
    """The stored eval holdout a stage reading ``input_dir`` compares its candidates with: the
    ``holdout/`` files of the :data:`HOLDOUT_STAGE` stage of the build ``input_dir`` belongs to
    (``<build>/stages/extract``: where the build layout puts it), then those of the build it was made
    against and of that one's base in turn (named ``NAME@baseK``), so a delta's copy of a page a base
    held out is tagged as the full build tags it. Empty for inputs outside a build (a stage run on
    shards made by hand); :class:`HoldoutMissing` when the build's extract stage is not complete, so a
    holdout is never passed over silently."""
    build = build_dir_of_stage(input_dir)
    if build is None:
        return []
    out = _stored_holdout(build, input_dir, "")
    for depth, base in enumerate(base_chain(build), 1):
        out += _stored_holdout(base, input_dir, f"@base{depth}")
    return out


def _stored_holdout(build: Path, input_dir: Path, suffix: str) -> list[HoldoutFile]:
    d = stage_dir(build, HOLDOUT_STAGE)
    m = read_stage_manifest(d)
    if m is None:
        raise HoldoutMissing(
            f"{input_dir} is a stage of build {build}, whose eval holdout ({d}) is not complete: "
            f"run the build's {HOLDOUT_STAGE} stage first"
        )
    return [
        HoldoutFile(Path(ref.path).name[: -len(SUFFIX)] + suffix, d / ref.path, ref.sha256, ref.records)
        for ref in m.side_outputs
        if ref.path.startswith(HOLDOUT_KIND + "/") and ref.path.endswith(SUFFIX)
    ]
