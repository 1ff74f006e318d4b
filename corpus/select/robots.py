"""Opt-outs from robots.txt: the hosts whose robots.txt disallows a named crawler the whole site, each
with the rule that did, read from a snapshot of robots.txt fetches.

A selection names the snapshot and the agents (``exclude_robots = { dir = "robots", agents = ["GPTBot"] }``);
the hosts found are excluded like an opt-out list's and recorded with their rule in the version's
manifest, so the version's id changes exactly when the answer does (``refresh_optouts`` makes a version
only then). The snapshot is a directory of Common Crawl's robots.txt WARCs (``*.warc.gz``/``*.warc``:
responses for ``/robots.txt``, the latest fetch of a host read), of ingest's ``robots/`` files (the
robots.txt a crawl carried) or of plain ``HOST.txt`` files; it must
lie under the selection's directory or ``CORPUS_HOSTS_ROOTS`` as an opt-out list does. The rule is
Python's ``urllib.robotparser`` reading of the file, asked whether the agent may fetch ``/``.
"""

from __future__ import annotations

import json
import urllib.robotparser
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from corpus.formats.docshard import SUFFIX, iter_lines
from corpus.model.digest import canonical_json
from corpus.model.errors import UserError
from corpus.select.hosts import ROOTS_ENV, normalize_host
from corpus.text.warc import MAX_ROBOTS_BYTES, RobotsRecord, iter_warc


@dataclass(frozen=True)
class RobotsOptOut:
    """A host excluded by its robots.txt: which agent it disallows, by which lines, fetched when."""

    host: str
    agent: str
    rule: str  # "User-agent: GPTBot / Disallow: /"
    fetched: str  # the fetch's WARC-Date, "" for a plain file

    def canonical(self) -> dict[str, str]:
        return {"host": self.host, "agent": self.agent, "rule": self.rule, "fetched": self.fetched}


def robots_request(where: str, value: object) -> tuple[str, tuple[str, ...]]:
    """``exclude_robots`` checked: its directory as written and its agents."""
    agents = value.get("agents") if isinstance(value, dict) else None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("dir"), str)
        or not isinstance(agents, list)
        or not agents
        or not all(isinstance(a, str) and a.strip() for a in agents)
    ):
        raise UserError(
            f"selection {where}: exclude_robots must be a table with dir (a path) and agents (a non-empty "
            'list of crawler names), e.g. { dir = "robots", agents = ["GPTBot"] }'
        )
    return value["dir"], tuple(a.strip() for a in agents)


def read_robots_dir(path: Path, roots: list[Path]) -> dict[str, tuple[str, str]]:
    """host -> (fetch date, robots.txt text) of the snapshot at ``path``: the latest fetch of each host
    (ties: the greater text). Refused in one line outside ``roots`` or when it is not a directory."""
    real = path.resolve()
    if not any(real.is_relative_to(root) for root in roots):
        allowed = ", ".join(map(str, roots)) or "none"
        raise UserError(
            f"exclude_robots dir {path}: outside the allowed roots ({allowed}): put it beside the "
            f"selection file or under a directory named in {ROOTS_ENV}"
        )
    if not real.is_dir():
        raise UserError(f"exclude_robots dir {path}: not a directory")
    found: dict[str, tuple[str, str]] = {}
    for f in sorted(real.iterdir()):
        if f.name.endswith((".warc.gz", ".warc")):
            fetched = _warc_robots(f)
        elif f.name.endswith(SUFFIX):
            fetched = _ingested_robots(f)
        elif f.suffix == ".txt" and (host := normalize_host(f.stem)) is not None:
            fetched = [(host, "", f.read_bytes()[:MAX_ROBOTS_BYTES].decode("utf-8", "replace"))]
        else:
            continue
        for host, date, text in fetched:
            if host not in found or (date, text) > found[host]:
                found[host] = (date, text)
    return found


def robots_line(record: RobotsRecord) -> bytes:
    """One robots.txt response as a line of ingest's ``robots/`` side output (a snapshot directory of
    its own: ``exclude_robots.dir`` may name a build's ``stages/ingest/robots``)."""
    return canonical_json({"url": record.url, "date": record.date, "text": record.text})


def _ingested_robots(path: Path) -> list[tuple[str, str, str]]:
    """(host, date, text) of every line of an ingest ``robots/`` file."""
    out = []
    for line in iter_lines(path):
        r = json.loads(line)
        host = normalize_host(urlsplit(r["url"]).hostname or "")
        if host is not None:
            out.append((host, r["date"], r["text"]))
    return out


def _warc_robots(path: Path) -> list[tuple[str, str, str]]:
    """(host, fetch date, text) of every 200 response for ``/robots.txt`` in a WARC file, read as ingest
    reads them (:func:`corpus.text.warc.iter_warc`)."""
    out = []
    for rec in iter_warc(path):
        if isinstance(rec, RobotsRecord) and (host := normalize_host(urlsplit(rec.url).hostname or "")):
            out.append((host, rec.date, rec.text))
    return out


def opted_out(robots: dict[str, tuple[str, str]], agents: tuple[str, ...]) -> tuple[RobotsOptOut, ...]:
    """The hosts whose robots.txt disallows ``/`` to one of ``agents`` (the first agent that is, in the
    order given), sorted by host."""
    out = []
    for host, (date, text) in sorted(robots.items()):
        parser = urllib.robotparser.RobotFileParser()
        parser.parse(text.splitlines())
        for agent in agents:
            if not parser.can_fetch(agent, f"https://{host}/"):
                out.append(RobotsOptOut(host, agent, _rule(parser, agent), date))
                break
    return tuple(out)


def _rule(parser: urllib.robotparser.RobotFileParser, agent: str) -> str:
    """The group and the line that disallow ``/`` to ``agent``, as the parser applies them."""
    groups = [e for e in parser.entries if e.applies_to(agent)]
    if not groups and parser.default_entry is not None:
        groups = [parser.default_entry]
    for entry in groups[:1]:
        for line in entry.rulelines:
            if line.applies_to("/"):
                verb = "Allow" if line.allowance else "Disallow"
                return f"User-agent: {', '.join(entry.useragents)} / {verb}: {line.path or '/'}"
    return "disallow all (the parser's reading)"
