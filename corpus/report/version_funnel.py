"""The funnel past the physical stages: each stored document the version does not select, by the
first of the selection's rules that drops it, overall, per source and per language.

Rules in the order :mod:`corpus.select.selection` applies them: tombstoned shards, the policy check by
check, then the other row rules (thresholds, languages, cutoffs, hosts, blocklists by category,
sources, licences, contamination), each top fraction, one representative per near-duplicate group. Each rule is the
version's own (the selection of that rule alone, :func:`corpus.version.query.select_rows`); a rejected
document counts once, so the steps add up to stored − selected. ``unexplained`` counts the documents
the rules and the bitmaps disagree on (0 for a version made from the selection it records).
See docs/report.md ("The version's selection").
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import numpy as np

from corpus.select.policy import decide_rows, missing_values
from corpus.select.selection import Selection, parse_selection
from corpus.version.open import Version
from corpus.version.query import columns, connect, select_rows

#: a selection that keeps every stored document: each row rule is this plus one key
EVERYTHING = Selection(
    allowed_licence_classes_by_tier={},
    include_contaminated=True,
    include_fuzzy_contaminated=True,
    near_duplicates="all",
)


def recorded_selection(canonical: dict[str, Any]) -> Selection:
    """The selection a version's manifest records (its canonical form, hosts inline), parsed again."""
    table = {k: v for k, v in canonical.items() if v not in (None, [], {})}
    return parse_selection(table, "recorded in the version")


def row_rules(s: Selection) -> list[tuple[str, str, Selection]]:
    """(rule, reason, the selection of that rule alone) for every row rule of ``s`` but its policy,
    in the selection's order."""
    one = dataclasses.replace
    rules: list[tuple[str, str, Selection]] = []
    for bound, glob, by_lang in (
        ("min_scores", s.min_scores, s.min_scores_by_lang),
        ("max_scores", s.max_scores, s.max_scores_by_lang),
    ):
        for col in sorted(set(glob) | {c for t in by_lang.values() for c in t}):
            only = {k: v for k, v in glob.items() if k == col}
            langs = {lang: {col: t[col]} for lang, t in by_lang.items() if col in t}
            rules.append((bound, col, one(EVERYTHING, **{bound: only, f"{bound}_by_lang": langs})))
    if s.min_lang_confidence is not None:
        rules.append(("min_lang_confidence", "", one(EVERYTHING, min_lang_confidence=s.min_lang_confidence)))
    if s.langs:
        rules.append(("langs", "", one(EVERYTHING, langs=s.langs)))
    if s.crawl_date_max is not None or s.crawl_date_max_by_source:
        dates = {"crawl_date_max": s.crawl_date_max, "crawl_date_max_by_source": s.crawl_date_max_by_source}
        rules.append(("crawl_date_max", "", one(EVERYTHING, **dates)))
    if s.exclude_hosts:
        rules.append(("exclude_hosts", "", one(EVERYTHING, exclude_hosts=s.exclude_hosts)))
    for b in s.blocklists:  # one step per category: the card counts each
        rules.append(("blocklist", b.category, one(EVERYTHING, blocklists=(b,))))
    if s.exclude_sources:
        rules.append(("exclude_sources", "", one(EVERYTHING, exclude_sources=s.exclude_sources)))
    licences = {
        "allowed_licence_classes": s.allowed_licence_classes,
        "allowed_licence_classes_by_tier": s.allowed_licence_classes_by_tier,
    }
    if s.allowed_licence_classes is not None or s.allowed_licence_classes_by_tier:
        rules.append(("licence", "", one(EVERYTHING, **licences)))
    if not s.include_contaminated:
        rules.append(("contamination", "", one(EVERYTHING, include_contaminated=False)))
    if not s.include_fuzzy_contaminated:
        rules.append(("fuzzy_contamination", "", one(EVERYTHING, include_fuzzy_contaminated=False)))
    return rules


def first_failures(passes: list[np.ndarray], n: int) -> np.ndarray:
    """Per row, the position in ``passes`` of the first rule it fails (-1: it passes every one)."""
    first = np.full(n, -1, dtype=np.int64)
    for i, ok in enumerate(passes):
        first[(first < 0) & ~ok] = i
    return first


class Rows:
    """The live shards' documents as one flat array, shards by name: a row is ``offset[shard] + index``."""

    def __init__(self, version: Version) -> None:
        self.names = sorted(s.name for s in version.live_shards)
        sizes = {s.name: s.docs for s in version.live_shards}
        starts = np.cumsum([0] + [sizes[name] for name in self.names])
        self.offset = dict(zip(self.names, starts[:-1].tolist(), strict=True))
        self.n = int(starts[-1])
        self.shards = version.live_shards

    def flat(self, per_shard: dict[str, np.ndarray]) -> np.ndarray:
        """Per-shard arrays (keyed by shard name) as one array in row order."""
        return np.concatenate([per_shard[name] for name in self.names]) if self.names else np.zeros(0, bool)

    def order(self, got: dict[str, np.ndarray]) -> np.ndarray:
        """The permutation putting a query's rows (its ``shard`` and ``index`` columns) in row order."""
        names, which = np.unique(np.asarray(got["shard"], dtype=object), return_inverse=True)
        starts = np.array([self.offset[str(n)] for n in names], dtype=np.int64)
        return np.argsort(starts[which] + np.asarray(got["index"], dtype=np.int64), kind="stable")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _in_row_order(con, rows: Rows, sql: str, params: list[Any] | None = None) -> dict[str, np.ndarray]:
    """A query over ``stored`` (with its ``shard`` and ``index``), every column in row order."""
    got = con.execute(sql, params or []).fetchnumpy()
    order = rows.order(got)
    return {k: np.asarray(v)[order] for k, v in got.items()}


def _facts(con, rows: Rows) -> dict[str, np.ndarray]:
    """Each row's source and language (``und`` when unknown), in row order."""
    got = _in_row_order(
        con,
        rows,
        "SELECT shard, \"index\", coalesce(source, '') AS source, "
        "coalesce(nullif(lang, ''), 'und') AS lang FROM stored",
    )
    return {k: got[k].astype(object) for k in ("source", "lang")}


def _policy_steps(con, s: Selection, rows: Rows, lang: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """One step per policy check, in the policy's order: a row fails the first check it fails (the
    reason the version's manifest counts it under, ``policy_reasons``)."""
    if s.policy is None:
        return []
    missing = missing_values(s.policy)
    scores = sorted(set(missing) & set(columns(con)))
    got = _in_row_order(
        con,
        rows,
        'SELECT shard, "index", coalesce(lang_confidence, 0.0)::DOUBLE AS lang_confidence, '
        "coalesce(tier, '') AS tier"
        + "".join(f", coalesce({_quoted(c)}, ?::DOUBLE)::DOUBLE AS {_quoted(c)}" for c in scores)
        + " FROM stored",
        [missing[c] for c in scores],
    )
    names, first = decide_rows(
        lang,
        got["lang_confidence"].astype(np.float64),
        got["tier"].astype(object),
        {c: got[c].astype(np.float64) for c in scores},
        s.policy,
    )
    return [("policy", name, first != i) for i, name in enumerate(names)]


def _top_fraction_steps(
    con, s: Selection, rows: Rows, lang: np.ndarray
) -> tuple[list[tuple[str, str, np.ndarray]], dict[str, dict[str, float]]]:
    """A step per top fraction (the row rules and the top fractions up to it), and per score the
    lowest value each language keeps: the quantile's threshold, drawn on the score's histogram."""
    steps, cutoffs = [], {}
    docs = {shard.name: shard.docs for shard in rows.shards}
    for i, t in enumerate(s.top_fraction):
        upto = dataclasses.replace(s, top_fraction=s.top_fraction[: i + 1], near_duplicates="all", buckets=())
        passes = rows.flat(select_rows(con, upto, docs))
        steps.append(("top_fraction", t.score, passes))
        col = _quoted(t.score)
        value = _in_row_order(
            con, rows, f"SELECT shard, \"index\", coalesce({col}::DOUBLE, 'NaN'::DOUBLE) AS v FROM stored"
        )["v"]
        kept = passes & ~np.isnan(value.astype(np.float64))
        cutoffs[t.score] = {
            str(g): float(value[kept & (lang == g)].min()) for g in sorted(set(lang[kept].tolist()))
        }
    return steps, cutoffs


def version_funnel(version: Version) -> dict[str, Any] | None:
    """The version's funnel (None for a build's own snapshot, which selects every stored document, or
    for shards without a metadata table)."""
    if version.manifest is None or not all(s.metadata.is_file() for s in version.live_shards):
        return None
    selection = recorded_selection(version.manifest["selection"])
    base = Version(version.base_dir, version.base, version.live_shards)
    con = connect(base, removed={})  # every stored row: a takedown is a step of its own
    rows = Rows(base)
    docs = {s.name: s.docs for s in base.live_shards}
    facts = _facts(con, rows)
    steps = _takedown_step(version, rows) + _policy_steps(con, selection, rows, facts["lang"])
    steps += [
        (rule, why, rows.flat(select_rows(con, only, docs))) for rule, why, only in row_rules(selection)
    ]
    top, cutoffs = _top_fraction_steps(con, selection, rows, facts["lang"])
    steps += top
    selected = rows.flat({s.name: version.selected(s) for s in base.live_shards})
    grouped = first_failures([ok for _, _, ok in steps], rows.n) < 0  # what reaches the groups
    # the step's reason says a per-crawl scope (one representative per group and build)
    scope = "" if selection.dedup_scope == "global" else selection.dedup_scope
    steps.append(("near_duplicates", scope, ~grouped | selected))
    first = first_failures([ok for _, _, ok in steps], rows.n)
    first[selected] = -1  # a selected document is never counted as dropped
    funnel = funnel_json(version, [(r, why) for r, why, _ in steps], first, selected, facts)
    # rules and bitmaps disagree: selected though a rule drops it, or dropped by no rule
    funnel["unexplained"] = int(
        np.count_nonzero(selected & ~grouped) + np.count_nonzero(~selected & (first < 0))
    )
    funnel["top_fraction_cutoffs"] = cutoffs
    return funnel


def _takedown_step(version: Version, rows: Rows) -> list[tuple[str, str, np.ndarray]]:
    """The documents taken down (``corpus takedown``, or inherited from a base), before every rule."""
    removed = version.removed
    if not removed:
        return []
    kept = {}
    for s in rows.shards:
        kept[s.name] = np.ones(s.docs, dtype=bool)
        kept[s.name][removed.get(s.name, [])] = False
    return [("takedown", "", rows.flat(kept))]


def step_key(rule: str, reason: str) -> str:
    """A step's name on the card and in its JSON: ``policy/gopher_alpha_words``, ``min_scores/quality``,
    ``contamination``."""
    return f"{rule}/{reason}" if reason else rule


def _step(key: str, rule: str, reason: str, removed: int, left: int) -> dict[str, Any]:
    return {"key": key, "rule": rule, "reason": reason, "removed": removed, "left": left}


def funnel_json(
    version: Version,
    steps: list[tuple[str, str]],
    first: np.ndarray,
    selected: np.ndarray,
    facts: dict[str, np.ndarray],
) -> dict[str, Any]:
    """The funnel as the card holds it: the steps that drop anything, in order, with what is left
    after each (a document no rule drops yet not selected: ``unexplained``); per source and per
    language the stored, the selected and the drops by step."""
    tombstoned = sum(s.docs for s in version.shards if s.name in version.tombstones)
    left = len(first)
    out = [_step("tombstone", "tombstone", "", tombstoned, left)] if tombstoned else []
    counts = Counter(first[first >= 0].tolist())
    keys = [step_key(rule, reason) for rule, reason in steps]
    for i, (rule, reason) in enumerate(steps):
        if counts[i]:
            left -= counts[i]
            out.append(_step(keys[i], rule, reason, counts[i], left))
    stray = int(np.count_nonzero(~selected & (first < 0)))
    if stray:
        out.append(_step("unexplained", "unexplained", "", stray, left - stray))
    return {
        "stored": len(first) + tombstoned,
        "selected": int(np.count_nonzero(selected)),
        "steps": out,
        "policy_reasons_recorded": dict(sorted((version.manifest or {}).get("policy_reasons", {}).items())),
        "by_source": _by_group(facts["source"], first, selected, keys),
        "by_lang": _by_group(facts["lang"], first, selected, keys),
    }


def _by_group(group: np.ndarray, first: np.ndarray, selected: np.ndarray, keys: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for g in sorted(set(group.tolist())):
        mine = group == g
        drops = Counter(first[mine & (first >= 0)].tolist())
        out[str(g)] = {
            "stored": int(np.count_nonzero(mine)),
            "selected": int(np.count_nonzero(mine & selected)),
            "removed": {keys[i]: n for i, n in sorted(drops.items())},
        }
    return out
