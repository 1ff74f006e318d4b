"""Benchmark: reading code repositories (corpus.code) next to reading WARC files, per core.

    python bench/bench_code_ingest.py [--data ../shared/data] [--repeat 3]

Repositories: every archive of ``code/`` read as the ingest stage reads it -- decompressed, every
file judged by the built-in rule table, the kept ones decoded, ordered, spooled and concatenated into
documents (``read_repository`` + ``documents()``; the licence scan, ``corpus.code.licence_detect``,
runs inside ``read_repository`` as it does in the stage). WARC: every file of ``warc/`` read as ingest reads
it -- records parsed, digested, HTML responses decoded (``iter_warc`` + ``decode_page``). The ingest
stage's own costs around both (writing the shards, the recrawl phase) are left out.

MB/s are of input bytes as stored (compressed archive / WARC file) and of the bytes inside (the
archives' uncompressed entries / the WARC records' payloads); the best of ``--repeat`` runs on one core.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import time
import zipfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.code.archive import archive_stem, repository_kind  # noqa: E402
from corpus.code.repository import read_repository  # noqa: E402
from corpus.code.rules import build_rules  # noqa: E402
from corpus.text.warc import BadRecord, SkippedRecord, decode_page, iter_warc  # noqa: E402
from tests.code.test_code_rules import READ_LIMITS  # noqa: E402


def inner_bytes(path: Path) -> int:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            return sum(i.file_size for i in z.infolist())
    with tarfile.open(path) as t:
        return sum(m.size for m in t.getmembers() if m.isfile())


def read_repos(paths: list[Path]) -> tuple[float, Counter, dict]:
    rules = build_rules([])
    t0 = time.perf_counter()
    per: dict = {}
    reasons: Counter = Counter()
    for p in paths:
        repo = read_repository(p, repository_kind(p), archive_stem(p), rules, **READ_LIMITS)
        out = sum(len(d.text.encode()) for d in repo.documents())
        s = repo.file_summary()
        per[p.name] = (
            s["kept"]["files"],
            {r: c["files"] for r, c in s["rejected"].items()},
            s["documents"],
            out,
            f"{repo.licence.expression} ({repo.licence.licence_class})",
        )
        reasons.update({r: c["bytes"] for r, c in s["rejected"].items()})
        repo.close()
    return time.perf_counter() - t0, reasons, per


def read_warcs(paths: list[Path]) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    payload = pages = 0
    for p in paths:
        for rec in iter_warc(p, 64 << 20, 2_000_000):
            if isinstance(rec, (SkippedRecord, BadRecord)):
                continue
            payload += len(rec.payload)
            decode_page(rec.payload, rec.content_type)
            pages += 1
    return time.perf_counter() - t0, payload, pages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    archives = sorted(p for p in (args.data / "code").iterdir() if p.is_file() and repository_kind(p))
    warcs = sorted((args.data / "warc").glob("*.warc.gz"))
    stored_code = sum(p.stat().st_size for p in archives)
    inner_code = sum(inner_bytes(p) for p in archives)
    stored_warc = sum(p.stat().st_size for p in warcs)

    code_s, reasons, per = min((read_repos(archives) for _ in range(args.repeat)), key=lambda r: r[0])
    warc_s, payload, pages = min((read_warcs(warcs) for _ in range(args.repeat)), key=lambda r: r[0])

    print(f"{'archive':42s} {'kept':>6s} {'docs':>5s}  {'licence':34s} rejected by reason")
    for name, (kept, rej, ndocs, _, lic) in per.items():
        reasons_text = ", ".join(f"{r} {n}" for r, n in sorted(rej.items()))
        print(f"{name:42s} {kept:6d} {ndocs:5d}  {lic:34s} {reasons_text}")
    kept_bytes = sum(v[3] for v in per.values())
    print()
    print(
        f"repositories: {len(archives)} archives, {stored_code / 1e6:.1f} MB stored, {inner_code / 1e6:.1f} MB "
        f"inside, {kept_bytes / 1e6:.1f} MB of documents; {code_s:.2f} s on one core: "
        f"{stored_code / 1e6 / code_s:.1f} MB/s stored, {inner_code / 1e6 / code_s:.1f} MB/s inside"
    )
    print(
        f"  rejected bytes: {', '.join(f'{r} {b / 1e6:.2f} MB' for r, b in reasons.most_common())} "
        f"({sum(reasons.values()) / inner_code:.0%} of the bytes inside)"
    )
    print(
        f"WARC: {len(warcs)} files, {stored_warc / 1e6:.1f} MB stored, {payload / 1e6:.1f} MB of payloads, "
        f"{pages} pages; {warc_s:.2f} s on one core: {stored_warc / 1e6 / warc_s:.1f} MB/s stored, "
        f"{payload / 1e6 / warc_s:.1f} MB/s of payloads"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
