"""A selection: which stored documents a version keeps, as a TOML file turned into one SQL query.

Selections are decisions made when a version is made, from the metadata table alone
(:mod:`corpus.formats.metadata`), never inside the build. A selection is data: every key is checked,
every column it names must exist, every value reaches DuckDB as a bound parameter, never as SQL text.
Order: the row rules (policy, scores, languages, cutoffs, hosts, sources, licences, contamination),
then each language's top fraction, then per near-duplicate group (code: per repository cluster) the
representative among the *selected* members, keep-first by build age unless ``prefer`` says "newest".
Every key, the groups and the order: docs/versions.md ("Selections").
"""

from __future__ import annotations

import datetime as dt
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from corpus.model.config import ConfigError, config_to_dict, stage_config
from corpus.model.digest import canonical_json, sha256_hex
from corpus.model.errors import UserError
from corpus.model.json_schema import SELF_CHECKED, Problem, Schema, first_problem, keys_of, path_text
from corpus.select.blocklists import Blocklist, excluded_sql, parse_blocklists, recorded_blocklists
from corpus.select.buckets import NAME, BucketDef, check_bucket_columns, parse_buckets
from corpus.select.hosts import allowed_roots, check_hosts, hosts_file_path, read_hosts_file
from corpus.select.licences import ALL_CLASSES
from corpus.select.policy import PolicyConfig
from corpus.select.robots import RobotsOptOut, opted_out, read_robots_dir, robots_request

NEAR_DUPLICATE_MODES = ("representative", "all")
#: ``dedup_scope``: a near-duplicate group's representative over every build (``global``), or one per
#: build of the chain, each crawl built on the one before (``per_crawl``)
DEDUP_SCOPES = ("global", "per_crawl")
#: ``prefer``: which copy of a near-duplicate group a source's documents put first, by build age
#: (``first``: the oldest build's, the default; ``newest``: the newest build's)
PREFER_MODES = ("first", "newest")
#: code is trained on only where its licence lets the weights be used without obligations: a repository
#: under a copyleft, unknown or no licence is stored (its class is a value) but not selected unless a
#: version says so (``allowed_licence_classes_by_tier = { code = [...] }``); other tiers are not limited
DEFAULT_CLASSES_BY_TIER: dict[str, tuple[str, ...]] = {"code": ("public_domain", "permissive")}

Share = Annotated[float, Schema(minimum=0, maximum=1), "a share between 0 and 1"]
Date = Annotated[str, Schema(format="date"), "a date YYYY-MM-DD"]
LicenceClass = Annotated[str, Schema(enum=list(ALL_CLASSES))]


def _optional() -> Any:
    return field(default=None)


@dataclass(frozen=True, kw_only=True)
class TopFractionKeys:
    """A ``[[top_fraction]]`` table as written."""

    score: str
    keep: Share
    by_lang: dict[str, Share] = _optional()


@dataclass(frozen=True, kw_only=True)
class BucketKeys:
    """A ``[[buckets]]`` table as written (no ``where``, or null: the rest)."""

    name: Annotated[str, Schema(pattern=f"^{NAME.pattern}$")]
    where: Annotated[str, Schema(minLength=1)] | None = None


@dataclass(frozen=True, kw_only=True)
class RobotsKeys:
    """``exclude_robots``: a robots.txt snapshot and the crawlers whose opt-outs count."""

    dir: Annotated[str, "a path"]
    agents: Annotated[list[str], Schema(minItems=1)]


@dataclass(frozen=True, kw_only=True)
class RobotsOptOutKeys:
    """One entry of ``robots_optouts``, as a version's manifest records it (the file read, as data)."""

    host: str
    agent: str
    rule: str
    fetched: str


@dataclass(frozen=True, kw_only=True)
class BlocklistKeys:
    """One category of ``blocklists``, as a version's manifest records it: the entries that matched."""

    hosts: list[str] = _optional()
    urls: list[str] = _optional()


@dataclass(frozen=True, kw_only=True)
class SelectionKeys:
    """Every key of a selection file as written, each optional: what :func:`parse_selection` checks
    first (unknown keys, types) and what ``corpus config schema selection`` prints. Ranges, dates,
    licence classes, hosts and predicates are checked by the parser (their messages name the key)."""

    min_scores: dict[str, float] = _optional()
    max_scores: dict[str, float] = _optional()
    min_scores_by_lang: dict[str, dict[str, float]] = _optional()
    max_scores_by_lang: dict[str, dict[str, float]] = _optional()
    min_lang_confidence: Share = _optional()
    langs: list[str] = _optional()
    top_fraction: TopFractionKeys | list[TopFractionKeys] = _optional()
    crawl_date_max: Date = _optional()
    crawl_date_max_by_source: dict[str, Date] = _optional()
    exclude_hosts: list[str] = _optional()
    exclude_hosts_file: Annotated[str, "a path"] = _optional()
    exclude_robots: RobotsKeys = _optional()
    robots_optouts: list[RobotsOptOutKeys] = _optional()
    exclude_blocklists: Annotated[dict[str, list[str]], "a table of category = [list files]"] = _optional()
    blocklists: dict[str, BlocklistKeys] = _optional()
    exclude_sources: list[str] = _optional()
    allowed_licence_classes: list[LicenceClass] = _optional()
    allowed_licence_classes_by_tier: dict[str, list[LicenceClass]] = _optional()
    include_contaminated: bool = _optional()
    include_fuzzy_contaminated: bool = _optional()
    near_duplicates: Literal[NEAR_DUPLICATE_MODES] = _optional()
    dedup_scope: Literal[DEDUP_SCOPES] = _optional()
    policy: Annotated[PolicyConfig, SELF_CHECKED] = _optional()
    buckets: Annotated[list[BucketKeys], "an array of tables [[buckets]] with name and where"] = _optional()
    prefer: Annotated[dict[str, Literal[PREFER_MODES]], 'a table of source = "first" or "newest"'] = (
        _optional()
    )


KEYS = keys_of(SelectionKeys)


@dataclass(frozen=True)
class TopFraction:
    score: str
    keep: float
    by_lang: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Selection:
    """A parsed selection; ``canonical()`` is what a version's id covers (hosts read from the file
    are inlined, so the id changes when the opt-out list does, wherever the file lives)."""

    min_scores: dict[str, float] = field(default_factory=dict)
    max_scores: dict[str, float] = field(default_factory=dict)
    min_scores_by_lang: dict[str, dict[str, float]] = field(default_factory=dict)
    max_scores_by_lang: dict[str, dict[str, float]] = field(default_factory=dict)
    min_lang_confidence: float | None = None
    langs: tuple[str, ...] = ()
    top_fraction: tuple[TopFraction, ...] = ()
    crawl_date_max: str | None = None
    crawl_date_max_by_source: dict[str, str] = field(default_factory=dict)
    exclude_hosts: tuple[str, ...] = ()
    #: the hosts of ``exclude_hosts`` a robots.txt snapshot excluded, with the rule that did
    robots_optouts: tuple[RobotsOptOut, ...] = ()
    #: category blocklists: the files to read, or (resolved against the build) the entries that matched
    blocklists: tuple[Blocklist, ...] = ()
    exclude_sources: tuple[str, ...] = ()
    allowed_licence_classes: tuple[str, ...] | None = None
    allowed_licence_classes_by_tier: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: dict(DEFAULT_CLASSES_BY_TIER)
    )
    include_contaminated: bool = False
    #: the fuzzy tier's hits (paraphrases of eval items) are excluded too unless this says otherwise
    include_fuzzy_contaminated: bool = False
    near_duplicates: str = "representative"
    #: one representative per near-duplicate group (``global``) or per group and crawl (``per_crawl``:
    #: the build that stored the document, :data:`DEDUP_SCOPES`)
    dedup_scope: str = "global"
    #: the quality policy (tier exemptions, per-language checks, Gopher/C4 rules, quality), or none
    policy: PolicyConfig | None = None
    #: buckets by predicate, in order (first match wins); none: the build's physical buckets
    buckets: tuple[BucketDef, ...] = ()
    #: per source, the build age order within a near-duplicate group (:data:`PREFER_MODES`); a source
    #: not named is ``first`` (keep-first)
    prefer: dict[str, str] = field(default_factory=dict)

    @property
    def newest_sources(self) -> tuple[str, ...]:
        """The sources whose documents prefer the newest build's copy, sorted."""
        return tuple(sorted(src for src, mode in self.prefer.items() if mode == "newest"))

    def canonical(self) -> dict[str, Any]:
        """Without buckets and ``prefer = "newest"`` exactly the keys selections had before either
        existed, so their ids stay (``"first"`` is the default: naming it changes nothing, id included)."""
        out = {
            "min_scores": dict(sorted(self.min_scores.items())),
            "max_scores": dict(sorted(self.max_scores.items())),
            "min_scores_by_lang": {
                k: dict(sorted(v.items())) for k, v in sorted(self.min_scores_by_lang.items())
            },
            "max_scores_by_lang": {
                k: dict(sorted(v.items())) for k, v in sorted(self.max_scores_by_lang.items())
            },
            "min_lang_confidence": self.min_lang_confidence,
            "langs": sorted(self.langs),
            "top_fraction": [
                {"score": t.score, "keep": t.keep, "by_lang": dict(sorted(t.by_lang.items()))}
                for t in self.top_fraction
            ],
            "crawl_date_max": self.crawl_date_max,
            "crawl_date_max_by_source": dict(sorted(self.crawl_date_max_by_source.items())),
            "exclude_hosts": sorted(set(self.exclude_hosts)),
            "exclude_sources": sorted(set(self.exclude_sources)),
            "allowed_licence_classes": None
            if self.allowed_licence_classes is None
            else sorted(set(self.allowed_licence_classes)),
            "allowed_licence_classes_by_tier": {
                tier: sorted(set(c)) for tier, c in sorted(self.allowed_licence_classes_by_tier.items())
            },
            "include_contaminated": self.include_contaminated,
            "near_duplicates": self.near_duplicates,
            "policy": None if self.policy is None else config_to_dict(self.policy),
        }
        if self.buckets:
            out["buckets"] = [b.canonical() for b in self.buckets]
        if self.newest_sources:
            out["prefer"] = {src: "newest" for src in self.newest_sources}
        if self.robots_optouts:
            out["robots_optouts"] = [r.canonical() for r in self.robots_optouts]
        if self.blocklists:
            out["blocklists"] = {b.category: b.canonical() for b in self.blocklists}
        if self.include_fuzzy_contaminated:  # only when set: a selection without it keeps its id
            out["include_fuzzy_contaminated"] = True
        if self.dedup_scope != "global":  # likewise
            out["dedup_scope"] = self.dedup_scope
        return out

    @property
    def digest(self) -> str:
        return sha256_hex(canonical_json(self.canonical()))

    def score_columns(self) -> set[str]:
        """Every column the selection names (checked against the table before anything runs)."""
        names = set(self.min_scores) | set(self.max_scores)
        for table in (*self.min_scores_by_lang.values(), *self.max_scores_by_lang.values()):
            names |= set(table)
        names |= {t.score for t in self.top_fraction}
        return names


def _err(where: str, msg: str) -> UserError:
    return UserError(f"selection {where}: {msg}")


def _number_table(where: str, key: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise _err(where, f"{key} must be a table of column = number")
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise _err(where, f"{key}.{k} must be a finite number, not {v!r}")
        out[str(k)] = float(v)
    return out


def _strings(where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _err(where, f"{key} must be a list of strings")
    return tuple(value)


def _date(where: str, key: str, value: Any) -> str:
    if isinstance(value, dt.date):
        return value.isoformat()
    try:
        return dt.date.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise _err(where, f"{key} must be a date YYYY-MM-DD, not {value!r}") from None


def _share(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise _err(where, f"{key} must be a share between 0 and 1, not {value!r}")
    return float(value)


def parse_selection(
    data: dict[str, Any], where: str = "<inline>", base_dir: Path | None = None, read_files: bool = True
) -> Selection:
    """A :class:`Selection` from a TOML table; every mistake is a one-line error naming the key.
    ``base_dir``: the selection file's directory (an inline selection has none); ``read_files=False``
    checks everything but the opt-out list file's contents (where that file is not at hand: a DAG's
    ``prepare`` runs on an Airflow worker, the file is on the cluster)."""
    if (problem := first_problem(SelectionKeys, data)) is not None:
        raise _err(where, _problem_text(problem, data))
    kw: dict[str, Any] = {}
    for key in ("min_scores", "max_scores"):
        if key in data:
            kw[key] = _number_table(where, key, data[key])
    for key in ("min_scores_by_lang", "max_scores_by_lang"):
        if key in data:
            if not isinstance(data[key], dict):
                raise _err(where, f"{key} must be a table of [{key}.LANG] tables")
            kw[key] = {str(lang): _number_table(where, f"{key}.{lang}", t) for lang, t in data[key].items()}
    if "min_lang_confidence" in data:
        kw["min_lang_confidence"] = _share(where, "min_lang_confidence", data["min_lang_confidence"])
    if "langs" in data:
        kw["langs"] = _strings(where, "langs", data["langs"])
    if "top_fraction" in data:
        items = data["top_fraction"]
        items = [items] if isinstance(items, dict) else items
        tops = []
        for i, t in enumerate(items if isinstance(items, list) else [None]):
            if not isinstance(t, dict) or not isinstance(t.get("score"), str) or "keep" not in t:
                raise _err(where, f'top_fraction[{i}] needs score = "NAME" and keep = SHARE')
            extra = sorted(set(t) - {"score", "keep", "by_lang"})
            if extra:
                raise _err(where, f"top_fraction[{i}] has unknown key(s) {', '.join(extra)}")
            by_lang = t.get("by_lang", {})
            if not isinstance(by_lang, dict):
                raise _err(where, f"top_fraction[{i}].by_lang must be a table of lang = share")
            tops.append(
                TopFraction(
                    t["score"],
                    _share(where, f"top_fraction[{i}].keep", t["keep"]),
                    {str(k): _share(where, f"top_fraction[{i}].by_lang.{k}", v) for k, v in by_lang.items()},
                )
            )
        kw["top_fraction"] = tuple(tops)
    if "crawl_date_max" in data:
        kw["crawl_date_max"] = _date(where, "crawl_date_max", data["crawl_date_max"])
    if "crawl_date_max_by_source" in data:
        table = data["crawl_date_max_by_source"]
        if not isinstance(table, dict):
            raise _err(where, "crawl_date_max_by_source must be a table of source = date")
        kw["crawl_date_max_by_source"] = {
            str(k): _date(where, f"crawl_date_max_by_source.{k}", v) for k, v in table.items()
        }
    hosts = check_hosts(where, _strings(where, "exclude_hosts", data.get("exclude_hosts", [])))
    if "exclude_hosts_file" in data:
        path = hosts_file_path(where, data["exclude_hosts_file"], base_dir)
        if read_files:
            hosts += read_hosts_file(path, allowed_roots(base_dir))
    if "robots_optouts" in data:  # a recorded selection: the robots.txt answer, as data
        kw["robots_optouts"] = tuple(RobotsOptOut(**r) for r in data["robots_optouts"])
    if "exclude_robots" in data:
        directory, agents = robots_request(where, data["exclude_robots"])
        path = hosts_file_path(where, directory, base_dir, key="exclude_robots.dir")
        if read_files:
            kw["robots_optouts"] = opted_out(read_robots_dir(path, allowed_roots(base_dir)), agents)
    hosts += tuple(r.host for r in kw.get("robots_optouts", ()))
    kw["exclude_hosts"] = hosts
    recorded = recorded_blocklists(where, data["blocklists"]) if "blocklists" in data else ()
    named = (
        parse_blocklists(where, data["exclude_blocklists"], base_dir, read_files)
        if "exclude_blocklists" in data
        else ()
    )
    both = sorted({b.category for b in recorded} & {b.category for b in named})
    if both:
        raise _err(where, f"blocklist {both[0]} is both recorded (blocklists) and named (exclude_blocklists)")
    if recorded or named:
        kw["blocklists"] = tuple(sorted(recorded + named, key=lambda b: b.category))
    if "exclude_sources" in data:
        kw["exclude_sources"] = _strings(where, "exclude_sources", data["exclude_sources"])
    if "allowed_licence_classes" in data:
        kw["allowed_licence_classes"] = _classes(
            where, "allowed_licence_classes", data["allowed_licence_classes"]
        )
    if "allowed_licence_classes_by_tier" in data:
        table = data["allowed_licence_classes_by_tier"]
        if not isinstance(table, dict):
            raise _err(where, "allowed_licence_classes_by_tier must be a table of tier = [classes]")
        kw["allowed_licence_classes_by_tier"] = DEFAULT_CLASSES_BY_TIER | {
            str(tier): _classes(where, f"allowed_licence_classes_by_tier.{tier}", v)
            for tier, v in table.items()
        }
    if "include_contaminated" in data:
        if not isinstance(data["include_contaminated"], bool):
            raise _err(where, "include_contaminated must be true or false")
        kw["include_contaminated"] = data["include_contaminated"]
    if "include_fuzzy_contaminated" in data:
        if not isinstance(data["include_fuzzy_contaminated"], bool):
            raise _err(where, "include_fuzzy_contaminated must be true or false")
        kw["include_fuzzy_contaminated"] = data["include_fuzzy_contaminated"]
    if "near_duplicates" in data:
        if data["near_duplicates"] not in NEAR_DUPLICATE_MODES:
            raise _err(where, f"near_duplicates must be one of {', '.join(NEAR_DUPLICATE_MODES)}")
        kw["near_duplicates"] = data["near_duplicates"]
    if "dedup_scope" in data:
        if data["dedup_scope"] not in DEDUP_SCOPES:
            raise _err(where, f"dedup_scope must be one of {', '.join(DEDUP_SCOPES)}")
        kw["dedup_scope"] = data["dedup_scope"]
        if kw["dedup_scope"] != "global" and kw.get("near_duplicates") == "all":
            raise _err(
                where,
                "dedup_scope chooses where a near-duplicate group's representative is chosen, and "
                'near_duplicates = "all" keeps every copy: give one or the other',
            )
    if "policy" in data:
        kw["policy"] = parse_policy(data["policy"], where)
    if "buckets" in data:
        kw["buckets"] = parse_buckets(data["buckets"], where)
    if "prefer" in data:
        kw["prefer"] = _prefer(where, data["prefer"])
        if kw.get("near_duplicates") == "all" and kw["prefer"]:
            raise _err(
                where,
                'prefer chooses which copy of a near-duplicate group is kept, and near_duplicates = "all" '
                "keeps every copy: give one or the other",
            )
        if kw.get("dedup_scope", "global") != "global" and "newest" in kw["prefer"].values():
            raise _err(
                where,
                'prefer = "newest" orders the builds of a group, and dedup_scope = "per_crawl" keeps a '
                "copy of each build: give one or the other",
            )
    return Selection(**kw)


def _problem_text(p: Problem, data: dict[str, Any]) -> str:
    """A key the selection does not have, or a value of the wrong type, as the rest of one line; a
    bucket is named by its name where it has one."""
    place = path_text(p.path)
    if p.path[:1] == ("buckets",) and len(p.path) == 2 and isinstance(p.value.get("name"), str):
        place = f"bucket {p.value['name']}"
    if p.unknown:
        keys = f"unknown key(s) {', '.join(p.unknown)}; known: {', '.join(p.known)}{p.hint}"
        return f"{place} has {keys}" if place else keys
    return f"{place} must be {p.expected}, not {p.value!r}"


def _prefer(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _err(where, 'prefer must be a table of source = "first" or "newest"')
    out = {}
    for k, v in value.items():
        if v not in PREFER_MODES:
            raise _err(where, f"prefer.{k} must be one of {', '.join(PREFER_MODES)}, not {v!r}")
        out[str(k)] = v
    return out


def _classes(where: str, key: str, value: Any) -> tuple[str, ...]:
    classes = _strings(where, key, value)
    bad = sorted(set(classes) - set(ALL_CLASSES))
    if bad:
        raise _err(where, f"unknown licence class(es) {', '.join(bad)}; known: {', '.join(ALL_CLASSES)}")
    return classes


def parse_policy(table: Any, where: str | None = None) -> PolicyConfig:
    """The ``policy`` table (a selection's, or with ``where`` None the build config's ``[policy]``,
    whose errors name the table alone) as a PolicyConfig."""
    if not isinstance(table, dict):
        if where:
            raise _err(where, "policy must be a table of PolicyConfig keys")
        raise UserError("[policy] must be a table of PolicyConfig keys")
    try:
        return stage_config(PolicyConfig, table, "policy")
    except ConfigError as e:
        raise (_err(where, str(e)) if where else UserError(str(e))) from None


def load_selection(path: Path) -> Selection:
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UserError(f"selection {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"selection {path}: not TOML: {e}") from None
    return parse_selection(data, str(path), Path(path).parent)


def parse_inline(text: str, read_files: bool = True) -> Selection:
    """A selection given as TOML text (a DAG Param) rather than a file (``read_files``: as for
    :func:`parse_selection`)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"selection <inline>: not TOML: {e}") from None
    return parse_selection(data, read_files=read_files)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def check_columns(selection: Selection, columns: list[str]) -> None:
    """Refuse a selection that names a column the table does not have, listing the ones it has."""
    missing = sorted(selection.score_columns() - set(columns))
    if missing:
        raise UserError(
            f"selection names unknown column(s) {', '.join(missing)}; known: {', '.join(sorted(columns))}"
        )
    check_bucket_columns(selection.buckets, columns)


def provenance_rules(s: Selection, alias: str) -> tuple[list[str], list[Any]]:
    """The rules that judge a document by its origin (cutoffs, hosts, sources, licences), over the
    columns of ``alias`` (``""``: the row itself; ``"c."``: an exact copy, :mod:`corpus.select.provenance`)."""
    conds: list[str] = []
    params: list[Any] = []
    if s.crawl_date_max is not None:
        conds.append(f"{alias}crawl_date <= CAST(? AS DATE)")
        params.append(s.crawl_date_max)
    for source, date in sorted(s.crawl_date_max_by_source.items()):
        conds.append(f"({alias}source <> ? OR {alias}crawl_date <= CAST(? AS DATE))")
        params.extend([source, date])
    if s.exclude_hosts:
        hosts = sorted(set(s.exclude_hosts))
        conds.append(
            f"NOT ({alias}host IN ({', '.join('?' * len(hosts))}) OR "
            + " OR ".join(f"ends_with({alias}host, ?)" for _ in hosts)
            + ")"
        )
        params.extend(hosts)
        params.extend("." + h for h in hosts)
    if s.blocklists:
        conds.append(excluded_sql(alias))
    if s.exclude_sources:
        srcs = sorted(set(s.exclude_sources))
        conds.append(f"{alias}source NOT IN ({', '.join('?' * len(srcs))})")
        params.extend(srcs)
    if s.allowed_licence_classes is not None:
        classes = sorted(set(s.allowed_licence_classes))
        conds.append(f"{alias}licence_class IN ({', '.join('?' * len(classes)) or 'NULL'})")
        params.extend(classes)
    for tier, allowed in sorted(s.allowed_licence_classes_by_tier.items()):
        classes = sorted(set(allowed))
        conds.append(
            f"({alias}tier IS DISTINCT FROM ? OR {alias}licence_class IN ({', '.join('?' * len(classes)) or 'NULL'}))"
        )
        params.extend([tier, *classes])
    return conds, params


#: the column a selection query gives each row: its shard's build age (0: the newest build's own shard)
AGE_COLUMN = "__build_age"
#: a row's near-duplicate group: its cluster, or itself alone (a delta's new documents tagged with a base
#: singleton's doc_id join it)
GROUP_SQL = "coalesce(nullif(dup_cluster_id, ''), doc_id)"


def group_sql(selection: Selection, aged: bool = True) -> str:
    """A row's near-duplicate group under the selection's ``dedup_scope``: :data:`GROUP_SQL`, and per
    crawl also the build that stored it (its build age, over :data:`AGE_COLUMN`; ``aged``: whether the
    query has that column; without it every row is age 0, one crawl)."""
    if selection.dedup_scope == "per_crawl" and aged:
        return f"({GROUP_SQL}) || '@' || {AGE_COLUMN}::VARCHAR"
    return GROUP_SQL


def age_key_sql(selection: Selection) -> tuple[str, list[Any]]:
    """The build-age term as a value over :data:`AGE_COLUMN` whose ascending order is
    :func:`age_order_sql`'s (what the partitioned version step sorts a group's members by), and its
    parameters."""
    newest = selection.newest_sources
    if not newest:
        return f"-{AGE_COLUMN}", []
    return (
        f"CASE WHEN source IN ({', '.join('?' * len(newest))}) THEN {AGE_COLUMN} ELSE -{AGE_COLUMN} END",
        list(newest),
    )


def age_order_sql(selection: Selection) -> tuple[str, list[Any]]:
    """The build-age term that orders a near-duplicate group before ``representative_key``, over the
    column :data:`AGE_COLUMN`, and its parameters: keep-first (oldest build first, key ``-age``) unless the
    row's own source prefers the newest copy (key ``+age``)."""
    if not selection.newest_sources:
        return f"{AGE_COLUMN} DESC", []
    return age_key_sql(selection)


def row_rules_sql(selection: Selection, table: str) -> tuple[str, list[Any]]:
    """The row rules of ``selection`` (policy verdict, scores, languages, cutoffs, hosts, sources,
    licences, contamination) as one boolean SQL expression over a row of ``table`` (NULL: not a pass),
    and its bound parameters: what a document is judged by on its own, before the quantiles and the
    near-duplicate groups (:func:`selection_sql`; per shard in the partitioned version step)."""
    conds: list[str] = []
    params: list[Any] = []

    def threshold(col: str, op: str, glob: dict[str, float], by_lang: dict[str, dict[str, float]]) -> None:
        langs = sorted(lang for lang, t in by_lang.items() if col in t)
        if langs:
            case = " ".join("WHEN lang = ? THEN ?" for _ in langs)
            for lang in langs:
                params.extend([lang, by_lang[lang][col]])
            if col in glob:
                conds.append(f"{_ident(col)} {op} (CASE {case} ELSE ? END)")
                params.append(glob[col])
            else:
                conds.append(
                    f"({_ident(col)} {op} (CASE {case} END) OR lang NOT IN ({', '.join('?' * len(langs))}))"
                )
                params.extend(langs)
        elif col in glob:
            conds.append(f"{_ident(col)} {op} ?")
            params.append(glob[col])

    s = selection
    for col in sorted(set(s.min_scores) | {c for t in s.min_scores_by_lang.values() for c in t}):
        threshold(col, ">=", s.min_scores, s.min_scores_by_lang)
    for col in sorted(set(s.max_scores) | {c for t in s.max_scores_by_lang.values() for c in t}):
        threshold(col, "<=", s.max_scores, s.max_scores_by_lang)
    if s.min_lang_confidence is not None:
        conds.append("lang_confidence >= ?")
        params.append(s.min_lang_confidence)
    if s.langs:
        conds.append(f"lang IN ({', '.join('?' * len(s.langs))})")
        params.extend(sorted(s.langs))
    own, own_params = provenance_rules(s, "")
    if own:
        # the stored document passes when its own origin does or when any exact copy's does
        copy, copy_params = provenance_rules(s, "c.")
        conds.append(
            f"(({' AND '.join(own)}) OR EXISTS (SELECT 1 FROM copies c WHERE c.doc_id = {table}.exact_keeper_id "
            f"AND {' AND '.join(copy)}))"
        )
        params.extend(own_params + copy_params)
    if not s.include_contaminated:
        conds.append("contaminated_run IS NULL")
    if not s.include_fuzzy_contaminated:
        conds.append("fuzzy_share IS NULL")
    if s.policy is not None:
        conds.append("policy_pass")
    return " AND ".join(conds) or "TRUE", params


def selection_sql(
    selection: Selection, table: str = "docs", ages: str | None = None
) -> tuple[str, list[Any]]:
    """One query over ``table`` returning (shard, "index", selected) for every row, and its bound
    parameters. Values are parameters; column names were checked by :func:`check_columns`. The
    provenance rules also read the view ``copies`` (exact copies' origins, one row per copy). With a
    ``policy``, ``table`` carries its verdict as a boolean column ``policy_pass`` (computed by
    :func:`corpus.version.query.policy_verdicts`: the policy is Python, the one definition the tests check).
    ``ages``: a table (shard, build_age) giving each shard's build age (:func:`corpus.version.open.build_age`),
    which orders each near-duplicate group before ``representative_key``; a shard it does not list is
    age 0, and without a table every row is (what :func:`corpus.version.query.select_rows` passes for a full
    build, whose shards are all age 0: the query then skips the join)."""
    s = selection
    where, params = row_rules_sql(s, table)
    # a NULL comparison (a missing score) is not a pass
    sql = [f"WITH rows AS (SELECT *, coalesce({where}, FALSE) AS passes FROM {table})"]
    prev = "rows"
    for i, t in enumerate(s.top_fraction):
        langs = sorted(t.by_lang)
        share = "?"
        share_params: list[Any] = [t.keep]
        if langs:
            share = "CASE " + " ".join("WHEN lang = ? THEN ?" for _ in langs) + " ELSE ? END"
            share_params = [x for lang in langs for x in (lang, t.by_lang[lang])] + [t.keep]
        col = _ident(t.score)
        # rank within the language among the rows still passing, best first, ties by doc_id, then by
        # place (two stored documents can share a doc_id: texts line_dedup made identical); a row is
        # kept while its rank is within round(share * n) of its language
        sql.append(
            f", top{i} AS (SELECT * EXCLUDE (passes), passes AND {col} IS NOT NULL AND "
            f"row_number() OVER (PARTITION BY lang, passes AND {col} IS NOT NULL "
            f'ORDER BY {col} DESC, doc_id, shard, "index") '
            f"<= round(({share}) * count(*) OVER (PARTITION BY lang, passes AND {col} IS NOT NULL)) "
            f"AS passes FROM {prev})"
        )
        params.extend(share_params)
        prev = f"top{i}"
    if s.near_duplicates == "representative":
        order, order_params = "", []
        if ages is not None:
            # each row's build age (keep-first within a near-duplicate group); without an ages table
            # every row is age 0 and the term is left out (a full build: representative_key alone)
            sql.append(
                f", aged AS (SELECT t.*, coalesce(a.build_age, 0) AS {AGE_COLUMN} FROM {prev} t LEFT JOIN "
                f"(SELECT shard, max(build_age) AS build_age FROM {ages} GROUP BY shard) a ON a.shard = t.shard)"
            )
            prev = "aged"
            order, order_params = age_order_sql(s)
            order += ", "
        # text: one document per group (a cluster, or an unclustered document alone), the oldest
        # build's first unless its source prefers the newest, then the lowest representative_key, then
        # the first by place (a total order: two stored documents can share a doc_id, and so a key);
        # code: every document of the best-ranked selected repository of its repository cluster (rank
        # ties only within one repository, so dense_rank keeps it whole)
        sql.append(
            f", picked AS (SELECT *, passes AND "
            f"row_number() OVER (PARTITION BY {group_sql(s, ages is not None)}, passes "
            f'ORDER BY {order}representative_key, shard, "index") = 1 '
            f"AND (repo_cluster_id IS NULL OR "
            f"dense_rank() OVER (PARTITION BY repo_cluster_id, passes ORDER BY repo_rank) = 1) "
            f"AS selected FROM {prev})"
        )
        params.extend(order_params)
    else:
        sql.append(f", picked AS (SELECT *, passes AS selected FROM {prev})")
    sql.append(' SELECT shard, "index", selected FROM picked ORDER BY shard, "index"')
    return "".join(sql), params


def recorded_selection(canonical: dict[str, Any]) -> Selection:
    """A version's recorded selection (:meth:`Selection.canonical`) parsed back, hosts inline: what a
    version made from it without a new selection (a tombstone, a takedown) keeps."""
    table = {k: v for k, v in canonical.items() if v not in (None, [], {})}
    if "top_fraction" in canonical:
        table["top_fraction"] = canonical["top_fraction"] or []
    return parse_selection({k: v for k, v in table.items() if k != "top_fraction" or v})
