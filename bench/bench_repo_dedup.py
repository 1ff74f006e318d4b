"""Benchmark: what repository-level dedup and code signals cost per MB of code, and the repository
clusters of the shared archives.

    python bench/bench_repo_dedup.py [--data ../shared/data] [--build DIR] [--ranks 1] [--repeat 3]

Builds every archive of ``code/`` (``corpus build``, unless ``--build`` names a finished build of
them), then on the code documents as minhash_dedup and annotate read them:

* **repo dedup, per document** (minhash_dedup's signature step for a code document: its files cut
  out, line keys and file hashes, the line-set MinHash) against what the same documents cost when
  they were signed as text (``MinHasher.signatures``, the previous version's path); the repository
  steps of the global phase (``repos``, ``repo_files``, ``repo_buckets``, ``repo_labels``,
  ``repo_clusters``, ``repo_decisions``, ``repo_docs``) are taken from the stage's log;
* **code signals** (``corpus.code.signals.document_code_signals``) against the web heuristics
  annotate computed for them before (``corpus.signals.heuristics.heuristic_signals``);
  process CPU time, best of ``--repeat``, MB = UTF-8 bytes of the documents' text.

Then the table of repository clusters (from the stage's annotations) and every pair of repositories
with exact line-set Jaccard above 0.1 (computed here from the documents, all pairs: 16 archives).
"""

from __future__ import annotations

import argparse
import itertools
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_incremental import build_args  # noqa: E402
from corpus.code.repo_dedup import (  # noqa: E402
    document_files,
    exact_jaccard,
    file_hashes,
    line_hashes,
    repository_id,
    repository_url,
)
from corpus.code.signals import document_code_signals  # noqa: E402
from corpus.formats.docshard import iter_docs  # noqa: E402
from corpus.signals.heuristics import heuristic_signals  # noqa: E402
from hpc_jobs.minhash_dedup.signatures import CodeRows as _CodeRows  # noqa: E402
from mpi_kernels.minhash import MinHasher  # noqa: E402
from runtime.global_phase import PartWriter  # noqa: E402


def best_cpu(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def stage_docs(build: Path, stage: str) -> list:
    return [
        d for p in sorted((build / "stages" / stage / "shards").glob("*.jsonl.zst")) for d in iter_docs(p)
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--build", type=Path, default=Path("/tmp/bench_repo_dedup"))
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    build = args.build
    log = ""
    if not (build / "snapshot" / "manifest.json").exists():
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "cli", *build_args([args.data / "code"], build, args.ranks)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        log = proc.stderr
        print(f"build of {args.data / 'code'} on {args.ranks} rank(s): {time.perf_counter() - t0:.1f} s wall")
    docs = [d for d in stage_docs(build, "line_dedup") if d.source_tier == "code"]
    mb = sum(len(d.text.encode()) for d in docs) / 1e6
    print(f"{len(docs)} code documents, {mb:.2f} MB")
    hasher = MinHasher()

    def repo_rows() -> None:
        rows = _CodeRows(hasher, 16, "bench")
        for i, d in enumerate(docs):
            rows.add(i, d)
        rows.write(PartWriter(Path("/tmp/bench_repo_dedup_part"), "p"))

    def text_sigs() -> None:
        hasher.signatures([d.text for d in docs])

    annotated = [d for d in stage_docs(build, "extract") if d.source_tier == "code"]
    amb = sum(len(d.text.encode()) for d in annotated) / 1e6

    def signals() -> None:
        for d in annotated:
            document_code_signals(d)

    def heuristics() -> None:
        for d in annotated:
            heuristic_signals(d.text)

    Path("/tmp/bench_repo_dedup_part").mkdir(exist_ok=True)
    rows = [
        (
            "repo dedup per document (line keys, file hashes, set MinHash)",
            best_cpu(repo_rows, args.repeat),
            mb,
        ),
        ("text MinHash of the same documents (before)", best_cpu(text_sigs, args.repeat), mb),
        ("code signals (annotate, now)", best_cpu(signals, args.repeat), amb),
        ("web heuristics of the same documents (annotate, before)", best_cpu(heuristics, args.repeat), amb),
    ]
    print("\n| what | CPU s | MB | s per MB | MB/s |\n|---|---|---|---|---|")
    for name, s, m in rows:
        print(f"| {name} | {s:.3f} | {m:.2f} | {s / m:.3f} | {m / s:.2f} |")
    steps = re.findall(r"\[minhash_dedup r0/\d+\] step (repo\w*|repos): .*?done now.*?\(([\d.]+)s\)", log)
    if steps:
        print(
            "\nrepository steps of the global phase (rank 0, wall):",
            ", ".join(f"{n} {t} s" for n, t in steps),
        )

    # the clusters, as the stage annotated them
    out = stage_docs(build, "minhash_dedup")
    repos: dict[str, list] = {}
    for d in out:
        if d.source_tier == "code":
            repos.setdefault(repository_url(d), []).append(d)
    name_of = {repository_id(u).hex(): u for u in repos}
    sets = {
        u: (
            np.unique(np.concatenate([line_hashes(document_files(d)) for d in ds])),
            np.unique(np.concatenate([file_hashes(document_files(d)) for d in ds])),
        )
        for u, ds in repos.items()
    }
    clusters: dict[str, list] = {}
    for u, ds in repos.items():
        a = ds[0].annotation("minhash_dedup", "repo_cluster")
        if a is not None:
            clusters.setdefault(a.value, []).append(u)
    print(
        "\n| cluster | member | documents | files | rank | estimated J (to rep.) | exact line J | file share |"
        "\n|---|---|---|---|---|---|---|---|"
    )
    for cid, members in sorted(clusters.items()):
        members.sort(key=lambda u: int(repos[u][0].annotation("minhash_dedup", "repo_rank").value))
        rep = members[0]
        for u in members:
            d = repos[u][0]
            files = sum(len(document_files(x)) for x in repos[u])
            print(
                f"| {name_of[cid].split('//')[1][:-1]} | {u} | {len(repos[u])} | {files} "
                f"| {d.annotation('minhash_dedup', 'repo_rank').value} | {d.scores['repo_similarity']:.3f} "
                f"| {exact_jaccard(sets[u][0], sets[rep][0]):.3f} | {d.scores['repo_file_share']:.3f} |"
            )
    print("\n| pair | exact line J | exact file J | clustered |\n|---|---|---|---|")
    for a, b in itertools.combinations(sorted(repos), 2):
        j = exact_jaccard(sets[a][0], sets[b][0])
        if j > 0.1:
            same = any(a in m and b in m for m in clusters.values())
            print(f"| {a} ~ {b} | {j:.3f} | {exact_jaccard(sets[a][1], sets[b][1]):.3f} | {same} |")


if __name__ == "__main__":
    main()
