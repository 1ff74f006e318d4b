"""Yield alarms: did a stage keep a very different share of its input than it usually does?

Every build of the same set of sources is one JSON line of a history file beside the builds
(``yield-history.jsonl``), recorded once and appended under a lock. A new build's metrics (a stage's
retention, the drop share of each reason, ingest's record shares) are compared with the trailing
median of the previous builds of the same sources and of the same kind (full or incremental: a delta
is judged on what it stored itself); a deviation beyond the band, in percentage points, is an alarm.
Bands come from the build config's ``[alarms]``; :func:`enforce` fails or warns per ``on_alarm``, on
these and on the alarms a stage raised about its own output (minhash_dedup's cluster sizes).
See docs/report.md ("Yield alarms").
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import logging
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from corpus.model.config import ConfigError, stage_config
from corpus.model.digest import json_digest
from corpus.model.facts import SnapshotFacts, StageFacts
from corpus.model.layout import base_build_of
from corpus.report.build_view import BuildView, open_build
from corpus.report.skipped import skipped_records
from corpus.select.selection import parse_policy
from corpus.version.open import StoredShard, Version
from corpus.version.query import columns, connect, policy_verdicts

log = logging.getLogger("corpus.report.alarms")

HISTORY_FILE = "yield-history.jsonl"

#: Bands in percentage points, from the reference funnel: how far a stage's yield may move between
#: two healthy builds of the same sources. Stages that never drop by design get tight bands.
DEFAULT_BANDS: dict[str, float] = {
    "ingest": 2.0,
    "extract": 5.0,
    "annotate": 1.0,
    "policy": 8.0,
    "policy/*lang*": 4.0,  # language ID: a broken LID moves this first
    "exact_dedup": 6.0,
    "line_dedup": 6.0,
    "minhash_dedup": 6.0,
    "decontaminate": 1.0,
    "tokenize": 1.0,
    "write_shards": 1.0,
    # the records ingest read: documents among them, and the skipped ones by kind
    "ingest_records": 5.0,
    "ingest_records/response_status_*": 5.0,  # every non-200 status (403s, 404s, redirects)
    "ingest_records/response_non_html": 5.0,
    "ingest_records/revisit": 5.0,
    "*": 5.0,  # any other stage's retention
}


@dataclass(frozen=True, kw_only=True)
class AlarmConfig:
    """The build config's ``[alarms]`` table."""

    on_alarm: str = "fail"  # "fail": the final task fails on a yield or stage alarm; "warn": it logs
    window: int = 5  # how many previous builds the trailing median looks at
    min_history: int = 1  # fewer previous builds than this: nothing to compare with, no alarm
    history: str = ""  # history file; default <builds-root>/yield-history.jsonl
    bands: dict[str, float] = field(default_factory=dict)  # merged over DEFAULT_BANDS

    def __post_init__(self) -> None:
        if self.on_alarm not in ("fail", "warn"):
            raise ValueError(f"on_alarm must be 'fail' or 'warn', not {self.on_alarm!r}")
        if self.window < 1 or self.min_history < 1:
            raise ValueError("window and min_history must be at least 1")

    def effective_bands(self) -> dict[str, float]:
        return {**DEFAULT_BANDS, **{k: float(v) for k, v in self.bands.items()}}


class BuildAlarmError(RuntimeError):
    """Raised by :func:`enforce` in ``fail`` mode; the message lists every alarm, the stages' own first."""

    def __init__(self, alarms: list[Alarm], stage_alarms: list[str] | None = None) -> None:
        self.alarms = alarms
        self.stage_alarms = stage_alarms or []
        said = [f"stage alarm: {a}" for a in self.stage_alarms] + [
            f"yield alarm: {a.message}" for a in alarms
        ]
        super().__init__("; ".join(said))


@dataclass(frozen=True)
class Alarm:
    metric: str  # "<stage>" (retention) or "<stage>/<reason glob>" (drop share)
    value: float  # this build, percent
    median: float  # trailing median of the previous builds, percent
    band: float  # allowed deviation, percentage points
    history: int  # how many previous builds the median is over

    @property
    def deviation(self) -> float:
        return self.value - self.median

    @property
    def message(self) -> str:
        what = f"{self.metric} retention" if "/" not in self.metric else f"{self.metric} drop share"
        return (
            f"{what} {self.value:.1f}% vs trailing median {self.median:.1f}% of {self.history} "
            f"build(s): {self.deviation:+.1f} points, band ±{self.band:g}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"deviation": self.deviation, "message": self.message}


def alarm_config(build_config: dict[str, Any]) -> AlarmConfig:
    return stage_config(AlarmConfig, build_config.get("alarms"), "alarms")


def default_history_path(view: BuildView) -> Path:
    """Next to the builds: the directory that holds the build directory."""
    base = view.build_dir if view.build_dir is not None else view.snapshot_dir
    assert base is not None
    return base.resolve().parent / HISTORY_FILE


def sources_key(sources: list[str]) -> str:
    return json_digest(sorted(sources))


def build_id(view: BuildView) -> str:
    """The snapshot (version) id, or the digest of the stage manifests of a build without a snapshot."""
    if view.snapshot_id is not None:
        return view.snapshot_id
    return json_digest([m.digest for m in view.stages])


def base_label(view: BuildView) -> str | None:
    """The base an incremental build was made against (its candidates' id), None for a full build."""
    found = base_build_of(view.build_dir) if view.build_dir is not None else None
    return found[1] if found else None


def own_shards(view: BuildView) -> tuple[StoredShard, ...]:
    """The version's live shards the build stored itself: an incremental build's candidates list the
    base's shards first (``extra.base.shards`` of them), by reference."""
    assert view.version is not None and view.snapshot is not None
    base = SnapshotFacts.of(view.snapshot).base
    inherited = {s.name for s in view.version.shards[: base.shards if base is not None else 0]}
    return tuple(s for s in view.version.live_shards if s.name not in inherited)


def policy_reasons(view: BuildView) -> tuple[dict[str, int], int] | None:
    """The reported version's policy rejections by reason and the stored documents it judged: the
    version manifest's for a full build; for an incremental build, the same policy run again over the
    build's own shards (their metadata tables only)."""
    v = view.version
    reasons = (v.manifest or {}).get("policy_reasons") if v else None
    if v is None or reasons is None:
        return None
    if base_label(view) is None:
        return reasons, sum(s.docs for s in v.live_shards)
    own = own_shards(view)
    counted: Counter[str] = Counter()
    if own:
        con = connect(Version(v.base_dir, v.base, own))
        policy = parse_policy(v.manifest["selection"]["policy"], f"version {v.snapshot_id}")
        policy_verdicts(con, policy, columns(con), counted)
    return dict(counted), sum(s.docs for s in own)


def build_metrics(view: BuildView) -> dict[str, dict[str, Any]]:
    """Per stage: retention % and the drop share % of every filter and quarantine reason; for a stage
    that skips records (ingest), ``<stage>_records``: the documents' share of the records read and the
    share skipped per reason; and
    ``policy``, the reported version's quality policy over the stored documents (its rejections by
    reason, from the version's manifest: the policy is a selection, not a stage; for an incremental
    build, over the documents it stored itself: :func:`policy_reasons`)."""
    out: dict[str, dict[str, Any]] = {}
    for m in view.stages:
        s = skipped_records(m)
        if s is not None and s["records_read"]:  # before the documents: a crawl of 403s has none
            out[f"{m.stage}_records"] = {
                "retention": 100 * s["documents"] / s["records_read"],
                "drops": {r: x["share"] for r, x in s["by_reason"].items()},
                "in": s["records_read"],
            }
        t = m.yield_counts().total()
        if not t.docs_in:
            continue
        drops = {r: 100 * n / t.docs_in for r, n in sorted((t.filtered + t.quarantined).items())}
        out[m.stage] = {"retention": 100 * t.docs_out / t.docs_in, "drops": drops, "in": t.docs_in}
    judged = policy_reasons(view)
    reasons, stored = judged if judged is not None else ({}, 0)
    if stored:
        drops = {r: 100 * n / stored for r, n in sorted(reasons.items())}
        out["policy"] = {"retention": 100 - sum(drops.values()), "drops": drops, "in": stored}
    return out


def metric_value(metrics: dict[str, dict[str, Any]], key: str) -> float | None:
    stage, _, pattern = key.partition("/")
    s = metrics.get(stage)
    if s is None:
        return None
    if not pattern:
        return s["retention"]
    return sum(v for r, v in s["drops"].items() if fnmatch.fnmatchcase(r, pattern))


def band_keys(metrics: dict[str, dict[str, Any]], bands: dict[str, float]) -> list[tuple[str, float]]:
    """The metrics this build is judged on: every stage's retention, and every reason band that applies."""
    keys = []
    for stage in metrics:
        keys.append((stage, bands.get(stage, bands.get("*", DEFAULT_BANDS["*"]))))
        keys += [(k, b) for k, b in sorted(bands.items()) if "/" in k and k.split("/", 1)[0] == stage]
    return keys


def evaluate(
    metrics: dict[str, dict[str, Any]], previous: list[dict[str, Any]], cfg: AlarmConfig
) -> list[Alarm]:
    """Pure: this build's metrics against the previous builds' (oldest first)."""
    recent = previous[-cfg.window :]
    alarms = []
    for key, band in band_keys(metrics, cfg.effective_bands()):
        value = metric_value(metrics, key)
        past = [v for h in recent if (v := metric_value(h["metrics"], key)) is not None]
        if value is None or len(past) < cfg.min_history:
            continue
        med = statistics.median(past)
        if abs(value - med) > band:
            alarms.append(Alarm(metric=key, value=value, median=med, band=band, history=len(past)))
    return alarms


def read_history(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError as e:
                raise ConfigError(f"{path}:{i + 1}: not a history record ({e})") from e
    return out


def previous_builds(history: list[dict[str, Any]], view: BuildView) -> list[dict[str, Any]]:
    """Earlier builds of the same sources and the same kind (incremental or full), oldest first, never
    this build itself."""
    key, me, incremental = sources_key(view.sources()), build_id(view), base_label(view) is not None
    return [
        h
        for h in history
        if h["sources_key"] == key and h["build_id"] != me and bool(h.get("base")) == incremental
    ]


def _resolve(view: BuildView, history_path: Path | str | None, cfg: AlarmConfig) -> Path:
    if history_path:
        return Path(history_path)
    if cfg.history:
        return Path(cfg.history)
    return default_history_path(view)


def assess(
    view: BuildView, history_path: Path | str | None = None, cfg: AlarmConfig | None = None
) -> tuple[list[Alarm], int, Path]:
    """Read-only: the alarms this build raises, how many previous builds were compared, the history file."""
    cfg = cfg or alarm_config(view.build_config)
    path = _resolve(view, history_path, cfg)
    prev = previous_builds(read_history(path), view)
    return evaluate(build_metrics(view), prev, cfg), len(prev[-cfg.window :]), path


def record(view: BuildView, path: Path) -> bool:
    """Append this build to the history unless it is there already (a retried task records once)."""
    entry = {
        "build_id": build_id(view),
        "sources_key": sources_key(view.sources()),
        "sources": view.sources(),
        "build_dir": str(view.build_dir.resolve()) if view.build_dir else "",
        "base": base_label(view),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "metrics": build_metrics(view),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # two builds finishing at once append whole lines
        f.seek(0)
        if any(json.loads(line).get("build_id") == entry["build_id"] for line in f if line.strip()):
            return False
        f.write(json.dumps(entry, sort_keys=True) + "\n")
    return True


def check_build(
    build_dir: Path | str,
    history_path: Path | str | None = None,
    bands: dict[str, float] | None = None,
    *,
    record_build: bool = True,
) -> list[Alarm]:
    """Compare a finished build with the trailing median of earlier builds of the same sources, then
    record it in the history. ``bands`` override the config's (and the defaults) key by key."""
    view = open_build(Path(build_dir))
    cfg = alarm_config(view.build_config)
    if bands:
        cfg = AlarmConfig(**{**asdict(cfg), "bands": {**cfg.bands, **bands}})
    alarms, _, path = assess(view, history_path, cfg)
    if record_build:
        record(view, path)
    return alarms


def stage_alarms(view: BuildView) -> list[str]:
    """The alarms the build's stages raised about their own output (``extra.alarms``), as
    ``"<stage>: <message>"``, in pipeline order."""
    return [f"{m.stage}: {a}" for m in view.stages for a in StageFacts.of(m).alarms]


def enforce(
    build_dir: Path | str,
    history_path: Path | str | None = None,
    bands: dict[str, float] | None = None,
    on_alarm: str | None = None,
) -> list[Alarm]:
    """The DAG's final task: :func:`check_build`, then fail loudly (``BuildAlarmError``) or only warn,
    as ``on_alarm`` (default: the build config's ``[alarms] on_alarm``) says, on a yield alarm or on an
    alarm a stage raised about its own output. Returns the yield alarms."""
    alarms = check_build(build_dir, history_path, bands)
    view = open_build(Path(build_dir))
    mode = on_alarm or alarm_config(view.build_config).on_alarm
    raised = stage_alarms(view)
    for s in raised:
        log.warning("stage alarm: %s", s)
    for a in alarms:
        log.warning("yield alarm: %s", a.message)
    if (alarms or raised) and mode == "fail":
        raise BuildAlarmError(alarms, raised)
    return alarms
