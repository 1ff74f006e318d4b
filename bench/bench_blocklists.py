"""Benchmark: a version with a real category blocklist against the same version without, and against
the plain way (the whole list in a Python set, every document's host and URL looked up).

    python bench/bench_blocklists.py [--docs 100000] [--hosts 20000] [--list DIR]

The list is UT1's adult category as datatrove 0.10.1 ships it for its URL filter (``domains``: 4.56 M
hosts, ``urls``: 19.6 k; the [bench] extra installs datatrove; ``--list`` names an extracted copy). The
build is generated metadata (10 shards): ``--docs`` documents on ``--hosts`` hosts, of which 2 % are
listed domains, 1 % subdomains of listed domains, and 0.5 % of the documents' URLs are listed URLs.
Each way runs in a process of its own (CPU seconds, peak RSS); the documents each excludes must be
the same set.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.versions.test_keep_first_selection import did, doc, write_candidates  # noqa: E402

#: peak RSS of this process image (VmHWM; ``ru_maxrss`` would carry the parent's peak across exec)
HWM = """
def hwm_mb():
    line = next(x for x in open("/proc/self/status") if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
"""

#: run in a process of its own: make a version of BUILD with SELECTION into OUT, print the facts
VERSION_CHILD = """
import json, sys, time
from pathlib import Path
from corpus.select.selection import load_selection, parse_inline
from corpus.version.plan import make_version
from corpus.version.open import open_version
t, c = time.perf_counter(), time.process_time()
sel = load_selection(Path(sys.argv[2])) if sys.argv[2] else parse_inline("")
made = make_version(Path(sys.argv[1]), sel, Path(sys.argv[3]))
wall, cpu = time.perf_counter() - t, time.process_time() - c
v = open_version(Path(sys.argv[3]))
import pyarrow.parquet as pq
dropped = sorted(r["doc_id"] for s in v.live_shards
                 for r, bit in zip(pq.read_table(s.metadata, columns=["doc_id"]).to_pylist(), v.selected(s)) if not bit)
print(json.dumps({"wall": wall, "cpu": cpu, "rss_mb": hwm_mb(),
                  "dropped": dropped, "blocklisted": made.manifest.get("blocklisted")}))
"""

#: the plain way: the whole list in a set, each document's host (and its parents) and URL looked up
PLAIN_CHILD = """
import json, sys, time
from pathlib import Path
import pyarrow.parquet as pq
from corpus.select.blocklists import url_key
t, c = time.perf_counter(), time.process_time()
listed = set()
for name in ("domains", "urls"):
    with open(Path(sys.argv[2]) / name, encoding="utf-8") as f:
        listed.update(line.strip().lower() for line in f if line.strip())
dropped = []
for p in sorted(Path(sys.argv[1]).glob("*/candidates/metadata/*.parquet")):
    for r in pq.read_table(p, columns=["doc_id", "host", "url"]).to_pylist():
        h = r["host"]
        parents = [h] + [h[i + 1:] for i, ch in enumerate(h) if ch == "."]
        if any(x in listed for x in parents) or url_key(r["url"]) in listed:
            dropped.append(r["doc_id"])
print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - c,
                  "rss_mb": hwm_mb(),
                  "dropped": sorted(dropped)}))
"""


def ut1_list(dest: Path) -> Path:
    """datatrove's shipped UT1 list, extracted into ``dest``."""
    import datatrove

    tar = Path(datatrove.__file__).parent / "assets" / "url_filterblacklistsv0_3_0.tar.gz"
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    return dest


def generate(root: Path, docs: int, hosts: int, listed: Path, seed: int = 0) -> Path:
    """The build: ``docs`` documents on ``hosts`` hosts, some of them listed (module docstring)."""
    rng = random.Random(seed)
    domains = [d for d in (listed / "domains").read_text().split("\n") if d]
    urls = [u for u in (listed / "urls").read_text().split("\n") if u]
    names = [f"site{i}.example-{i % 97}.com" for i in range(hosts)]
    for i in rng.sample(range(hosts), hosts // 50):
        names[i] = rng.choice(domains)
    for i in rng.sample(range(hosts), hosts // 100):
        names[i] = "blog." + rng.choice(domains)
    shards: dict[str, list[dict]] = {f"web-{k:05d}": [] for k in range(10)}
    for n in range(docs):
        if rng.random() < 0.005:
            u = rng.choice(urls)
            url, host = "https://" + u, u.split("/", 1)[0]
        else:
            host = rng.choice(names)
            url = f"https://{host}/page/{n}"
        shards[f"web-{n % 10:05d}"].append(doc(did(n + 1), url=url, host=host))
    return write_candidates(root, "build", shards)


def child(code: str, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", HWM + code, *args], cwd=ROOT, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=20_000)
    ap.add_argument("--list", type=Path, default=None, help="a directory holding UT1's domains and urls")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-blocklists-"))
    listed = args.list or ut1_list(work / "ut1")
    lines = {n: sum(1 for _ in open(listed / n, encoding="utf-8")) for n in ("domains", "urls")}
    t = time.perf_counter()
    build = generate(work / "builds", args.docs, args.hosts, listed)
    print(
        f"list: {lines['domains']:,} domains, {lines['urls']:,} urls; build: {args.docs:,} documents on "
        f"{args.hosts:,} hosts, generated in {time.perf_counter() - t:.1f} s"
    )
    (work / "sel.toml").write_text(
        f'exclude_blocklists = {{ adult = ["{listed / "domains"}", "{listed / "urls"}"] }}\n'
    )
    runs = {
        "version, no selection": child(VERSION_CHILD, str(build), "", str(work / "v0")),
        "version, UT1 adult blocklist": child(
            VERSION_CHILD, str(build), str(work / "sel.toml"), str(work / "v1")
        ),
        "plain: whole list in a set": child(PLAIN_CHILD, str(work / "builds"), str(listed)),
    }
    ours, plain = runs["version, UT1 adult blocklist"], runs["plain: whole list in a set"]
    print(
        f"documents excluded: {len(ours['dropped']):,} (manifest: {ours['blocklisted']}); "
        f"the plain way: {len(plain['dropped']):,}; same set: {ours['dropped'] == plain['dropped']}"
    )
    print("\n| way | wall s | CPU s | peak RSS MB |\n|---|---:|---:|---:|")
    for name, r in runs.items():
        print(f"| {name} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
