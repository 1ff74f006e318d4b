"""Make the bundled demo sample (``sample/``) from ../shared/data: a few MB of real crawl.

    python tools/make_sample.py [--data ../shared/data] [--out sample]

Deterministic: pages are chosen by a stable hash of their URL, records are copied byte for byte
(each gzip member of a WARC.gz is one record), and gzip headers carry no timestamp. What it takes:

* ``web/crawl-2026-03-sample-part{0,1}.warc.gz``: a per-site quota of the first crawl (pages up to 150 kB), so
  every language and site of the crawl is present;
* ``web/crawl-2026-06-sample.warc.gz``: from the later crawl, the identical recrawls of the pages
  chosen above and the arm64 installation-guide pages whose amd64 twin was chosen (near-duplicates);
* ``curated/perl-doc.jsonl.gz``: 40 documents of the curated perl-doc source, declared curated by
  ``curated/corpus-sources.toml``;
* ``edge/``: real malformed or odd WARC files from WARC tools' test suites (a corrupt gzip WARC,
  revisits and duplicates, non-UTF-8 HTTP headers, a response missing its status text).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
from collections import defaultdict
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from corpus.model.digest import stable_hash64
from corpus.text.sources import DECLARATION_FILE

ROOT = Path(__file__).resolve().parent.parent
MAX_PAGE_BYTES = 150_000
SITE_QUOTA = {
    "installation-guide-amd64": 100,
    "harden-doc": 50,
    "python3.11-doc": 50,
    "debian-history": 8,
    "debian-policy": 8,
}
OTHER_SITE_QUOTA = 5  # every translated FAQ / developers-reference / maint-guide site
CURATED_DOCS = 40
CURATED_MAX_CHARS = 60_000
EDGE_FILES = {
    "example-bad.warc.gz.bad": "example-bad.warc.gz",  # renamed so a directory scan reads it as WARC
    "dupes.warc.gz": "dupes.warc.gz",
    "fb.warc.gz": "fb.warc.gz",
    "missing-status-text.warc": "missing-status-text.warc",
    "not_utf8_http_header.warc": "not_utf8_http_header.warc",
}


def members(path: Path):
    """(record type, url, compressed bytes of the record's gzip member) for every record."""
    data = path.read_bytes()
    with open(path, "rb") as f:
        it = ArchiveIterator(f)
        for rec in it:
            rtype = rec.rec_type
            url = rec.rec_headers.get_header("WARC-Target-URI") or ""
            length = int(rec.rec_headers.get_header("Content-Length") or 0)
            rec.content_stream().read()
            it.read_to_end()
            off, n = it.get_record_offset(), it.get_record_length()
            yield rtype, url, length, data[off : off + n]


def site(url: str) -> str:
    return url.split("/")[2].removesuffix(".docs.example.org")


def choose_first_crawl(data: Path) -> tuple[bytes, list[bytes], set[str]]:
    by_site: dict[str, list[tuple[int, str, bytes]]] = defaultdict(list)
    info = b""
    for part in sorted((data / "warc").glob("crawl-2026-03-part*.warc.gz")):
        for rtype, url, length, raw in members(part):
            if rtype == "warcinfo" and not info:
                info = raw
            elif rtype == "response" and length <= MAX_PAGE_BYTES:
                by_site[site(url)].append((stable_hash64("sample", url), url, raw))
    chosen: list[tuple[str, bytes]] = []
    for s in sorted(by_site):
        quota = SITE_QUOTA.get(s, OTHER_SITE_QUOTA)
        chosen += [(url, raw) for _, url, raw in sorted(by_site[s])[:quota]]
    chosen.sort(key=lambda t: stable_hash64("order", t[0]))
    return info, [raw for _, raw in chosen], {url for url, _ in chosen}


def choose_second_crawl(data: Path, first: set[str]) -> tuple[bytes, list[bytes]]:
    info, out = b"", []
    for rtype, url, _length, raw in members(data / "warc" / "crawl-2026-06.warc.gz"):
        if rtype == "warcinfo":
            info = raw
        elif rtype == "response" and (url in first or url.replace("arm64", "amd64") in first):
            out.append(raw)
    return info, out


def write_warc(path: Path, records: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(records))


#: the curated file declared as what it is, where it lies (corpus.text.sources.DECLARATION_FILE)
CURATED_DECLARATION = """\
# What the files of this directory are, declared where they lie (corpus/ingest/sources.py): a JSONL file
# nothing declares is read as tier "web", since trust is declared, never inferred from a file format.
# Perl's own documentation (POD pages of Debian's perl-doc) is a curated source.
[[sources]]
match = "perl-doc.jsonl.gz"
name = "perl-doc"
tier = "curated"
"""


def write_curated(data: Path, out: Path) -> int:
    lines = gzip.decompress((data / "curated" / "perl-doc.jsonl.gz").read_bytes()).splitlines()
    small = [ln for ln in lines if len(ln) <= CURATED_MAX_CHARS]
    picked = sorted(small, key=lambda ln: stable_hash64("sample", ln))[:CURATED_DOCS]
    picked.sort(key=lines.index)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(b"\n".join(picked) + b"\n", mtime=0))
    (out.parent / DECLARATION_FILE).write_text(CURATED_DECLARATION)
    return len(picked)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=ROOT / "sample")
    args = ap.parse_args()
    info3, first, urls = choose_first_crawl(args.data)
    for part in range(2):  # two files, so a 2-rank build reads them in parallel
        write_warc(args.out / "web" / f"crawl-2026-03-sample-part{part}.warc.gz", [info3, *first[part::2]])
    info6, second = choose_second_crawl(args.data, urls)
    write_warc(args.out / "web" / "crawl-2026-06-sample.warc.gz", [info6, *second])
    n = write_curated(args.data, args.out / "curated" / "perl-doc.jsonl.gz")
    (args.out / "edge").mkdir(parents=True, exist_ok=True)
    for src, dst in EDGE_FILES.items():
        shutil.copyfile(args.data / "warc-edge" / src, args.out / "edge" / dst)
    print(
        f"{len(first)} pages of crawl-2026-03, {len(second)} of crawl-2026-06, {n} curated documents, "
        f"{len(EDGE_FILES)} edge files -> {args.out}"
    )


if __name__ == "__main__":
    main()
