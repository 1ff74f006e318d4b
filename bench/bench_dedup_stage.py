"""The whole near-duplicate stage: ours on 1 and 2 ranks, datatrove's 4 MinHash steps, datasketch.

    python bench/bench_dedup_stage.py [--in STAGE_DIR | --crawl] [--copies 1500]
    python bench/bench_dedup_stage.py --vs-kernel [--in STAGE_DIR | --crawl]   # the stage against its kernel

Input: a completed stage directory (e.g. ``build/stages/line_dedup`` of a sample build), or by default
real text made into one: every POD of Perl's documentation, each of its ``=head`` sections, and
``--copies`` copies of sections with 0-25% of their words edited (graded near-duplicates). ``--crawl``:
every page of the shared crawls (``warc/``, both crawls, extracted as the extract stage does, cached in
``--cache``; their recrawls and architecture variants are the near-duplicates) and every POD of Perl's
documentation: 5,399 documents, 48.8 MB. Every implementation gets the same documents; wall time
includes reading them and writing decisions.

* ours: ``python -m hpc_jobs.minhash_dedup`` under ``mpiexec -n 1`` and ``-n 2`` (fresh output each time).
* datatrove: MinhashDedupSignature -> Buckets (14 tasks) -> Cluster -> Filter with the local executor,
  one worker, sha1 hashing (xxhash is not installed), default spaCy word tokenizer.
* datasketch: MinHash (our normalization and 5-gram shingles in Python) -> MinHashLSH insert and query
  -> union-find, one process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_minhash import BANDS, PERM, ROWS, shingles, table  # noqa: E402
from bench.bench_scale import extracted_pages  # noqa: E402
from corpus.dedup.union_find import UnionFind  # noqa: E402
from corpus.formats.docshard import iter_docs  # noqa: E402
from corpus.model import Document  # noqa: E402
from runtime.runner import shards_of_stage  # noqa: E402
from tests.dedup.dedup_corpus import make_doc, perl_pods, perl_sections, write_stage_dir  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"


def default_corpus(copies: int) -> list[Document]:
    rnd = random.Random(2)
    pods = [p["text"] for p in perl_pods(SHARED)]
    sections = perl_sections(SHARED)
    texts = pods + sections
    for _ in range(copies):
        words = rnd.choice(sections).split()
        for i in rnd.sample(range(len(words)), int(len(words) * rnd.uniform(0, 0.25))):
            words[i] = f"edit{rnd.randrange(10**9)}"
        texts.append(" ".join(words))
    return [make_doc(t, i) for i, t in enumerate(texts)]


def crawl_corpus(cache_dir: Path) -> list[Document]:
    """Every page of the shared crawls (extracted once, cached: about 2 minutes on 2 cores) and every POD."""
    pages = extracted_pages(sorted((SHARED / "warc").glob("*.warc.gz")), cache_dir, "crawl-text")
    texts = [text for _, text in pages] + [p["text"] for p in perl_pods(SHARED)]
    return [make_doc(t, i) for i, t in enumerate(texts)]


def ours(in_dir: Path, ranks: int) -> tuple[float, int]:
    wall, removed, _ = ours_timed(in_dir, ranks)
    return wall, removed


def ours_timed(in_dir: Path, ranks: int, env: dict[str, str] | None = None) -> tuple[float, int, float]:
    """Wall time, documents removed, and CPU time (user + system of mpiexec and its ranks)."""
    with tempfile.TemporaryDirectory() as tmp:
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.time()
        subprocess.run(
            [
                str(Path(sys.executable).parent / "mpiexec"),
                "-n",
                str(ranks),
                sys.executable,
                "-m",
                "hpc_jobs.minhash_dedup",
                "--in",
                str(in_dir),
                "--out",
                f"{tmp}/out",
            ],
            check=True,
            cwd=ROOT,
            capture_output=True,
            env=env,
        )
        wall = time.time() - t
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        m = json.loads(Path(f"{tmp}/out/manifest.json").read_text())
        labelled = m["extra"]["docs_in_clusters"] - m["extra"]["clusters"]  # members a version drops
        return wall, labelled, cpu


def kernel_cpu(docs: list[Document]) -> float:
    """CPU seconds of the signature kernel alone on the same texts, in batches as the stage runs it
    (compiled beforehand: the stage loads numba's cache, which its own time includes)."""
    from mpi_kernels.minhash import MinHasher

    h = MinHasher()
    h.signatures([docs[0].text])
    texts = [d.text for d in docs]
    t = time.process_time()
    for lo in range(0, len(texts), 1024):
        h.signatures(texts[lo : lo + 1024])
    return time.process_time() - t


def bytecode_envs(tmp: Path, tiny: Path) -> dict[str, dict[str, str]]:
    """The stage's environment without and with bytecode. Without: every module compiled from source
    in every rank (this machine: ``PYTHONDONTWRITEBYTECODE=1`` and a venv installed without bytecode),
    bytecode looked for in an empty ``PYTHONPYCACHEPREFIX`` only. With: bytecode of every module the
    stage imports written once (a run on one document) and then read, as after an install that
    compiles it (pip's default, ``uv pip install --compile-bytecode``)."""
    (tmp / "no-pycache").mkdir()
    without = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(tmp / "no-pycache")}
    writing = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    ours_timed(tiny, 1, {**writing, "PYTHONPYCACHEPREFIX": str(tmp / "pycache")})
    return {"no": without, "yes": {**without, "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}}


def vs_kernel(in_dir: Path, docs: list[Document], mb: float, repeats: int, tmp: Path) -> None:
    """The whole stage on one rank (start-up, read, signatures, buckets, components, verification,
    write) against the kernel on the same documents, both as CPU time, best of ``repeats`` (taken in
    turn, so each sees the same load). Start-up (interpreter, imports, MPI, numba's cache) is measured
    as the same stage on one document; both without and with bytecode (``bytecode_envs``)."""
    tiny = write_stage_dir(tmp / "tiny", docs[:1], shards=1)
    envs = bytecode_envs(tmp, tiny)
    kernels, startups, wholes = [], {b: [] for b in envs}, {b: [] for b in envs}
    for _ in range(repeats):
        kernels.append(kernel_cpu(docs))
        for b, env in envs.items():
            startups[b].append(ours_timed(tiny, 1, env)[2])
            wholes[b].append(ours_timed(in_dir, 1, env))
    kernel = min(kernels)
    print(f"## minhash_dedup against its kernel, {len(docs)} documents, {mb:.1f} MB, one rank\n")
    rows = [("kernel (MinHasher.signatures)", "-", kernel)]
    for b in envs:
        wall, removed, cpu = min(wholes[b], key=lambda r: r[2])
        startup = min(startups[b])
        rows += [
            (f"stage, whole (wall {wall:.1f} s, removed {removed})", b, cpu),
            ("stage start-up (the stage on 1 document)", b, startup),
            ("stage minus start-up", b, cpu - startup),
        ]
    print(
        table(
            [
                {
                    "what": w,
                    "bytecode": b,
                    "cpu_s": round(c, 2),
                    "MB_per_cpu_s": round(mb / c, 1),
                    "vs_kernel": round(c / kernel, 2),
                }
                for w, b, c in rows
            ]
        )
    )


def datatrove(docs: list[Document]) -> tuple[float, int]:
    from datatrove.data import Document as DtDocument
    from datatrove.executor.local import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.utils.hashing import HashConfig

    cfg = MinhashConfig(num_buckets=BANDS, hashes_per_bucket=ROWS, hash_config=HashConfig(hash_fc="sha1"))
    dt_docs = [DtDocument(text=d.text, id=d.doc_id) for d in docs]
    kept: list = []

    def collect(data, rank=0, world_size=1):
        for doc in data:
            kept.append(doc.id)
            yield doc

    with tempfile.TemporaryDirectory() as tmp:
        t = time.time()
        for pipeline, tasks in (
            ([dt_docs, MinhashDedupSignature(output_folder=f"{tmp}/sigs", config=cfg)], 1),
            (
                [MinhashDedupBuckets(input_folder=f"{tmp}/sigs", output_folder=f"{tmp}/buckets", config=cfg)],
                BANDS,
            ),
            (
                [
                    MinhashDedupCluster(
                        input_folder=f"{tmp}/buckets", output_folder=f"{tmp}/remove", config=cfg
                    )
                ],
                1,
            ),
            ([dt_docs, MinhashDedupFilter(input_folder=f"{tmp}/remove"), collect], 1),
        ):
            LocalPipelineExecutor(
                pipeline=pipeline,
                tasks=tasks,
                workers=1,
                logging_dir=f"{tmp}/logs-{len(kept)}-{time.monotonic_ns()}",
                skip_completed=False,
            ).run()
        return time.time() - t, len(docs) - len(kept)


def datasketch(docs: list[Document]) -> tuple[float, int]:
    from datasketch import MinHash, MinHashLSH

    t = time.time()
    lsh = MinHashLSH(num_perm=PERM, params=(BANDS, ROWS))
    mhs = []
    for i, d in enumerate(docs):
        m = MinHash(num_perm=PERM, seed=1)
        m.update_batch(shingles(d.text))
        mhs.append(m)
        if not m.is_empty():
            lsh.insert(i, m)
    uf = UnionFind()
    for i, m in enumerate(mhs):
        if not m.is_empty():
            for j in lsh.query(m):
                uf.union(i.to_bytes(4, "big"), j.to_bytes(4, "big"))
    removed = sum(1 for n in uf.parent if uf.find(n) != n)
    return time.time() - t, removed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--in", dest="in_dir", type=Path, help="a completed stage directory (default: Perl docs)")
    ap.add_argument("--crawl", action="store_true", help="every page of the shared crawls and every POD")
    ap.add_argument(
        "--cache", type=Path, default=Path("/tmp/bench_dedup_stage"), help="--crawl's extracted text"
    )
    ap.add_argument("--copies", type=int, default=1500)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--vs-kernel", action="store_true", help="only the stage against its kernel")
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.in_dir:
            in_dir = a.in_dir
            docs = [d for s in shards_of_stage(in_dir) for d in iter_docs(s.path)]
        else:
            docs = crawl_corpus(a.cache) if a.crawl else default_corpus(a.copies)
            in_dir = write_stage_dir(Path(tmp) / "in", docs, shards=8)
        mb = sum(len(d.text.encode()) for d in docs) / 1e6
        if a.vs_kernel:
            vs_kernel(in_dir, docs, mb, a.repeats, Path(tmp))
            return
        print(f"## Near-duplicate stage, {len(docs)} documents, {mb:.1f} MB, b={BANDS} r={ROWS}\n")
        runs = [
            ("ours minhash_dedup", 1, *ours(in_dir, 1)),
            ("ours minhash_dedup", 2, *ours(in_dir, 2)),
            ("datasketch (1 process)", 1, *datasketch(docs)),
            ("datatrove 4 steps (1 worker)", 1, *datatrove(docs)),
        ]
    base = runs[0][2]
    rows = [
        {
            "impl": name,
            "ranks": ranks,
            "wall_s": round(wall, 1),
            "MB_per_s": round(mb / wall, 2),
            "removed": removed,
            "time_vs_ours_1_rank": round(wall / base, 2),
        }
        for name, ranks, wall, removed in runs
    ]
    print(table(rows))
    if a.json:
        a.json.write_text(json.dumps({"docs": len(docs), "MB": round(mb, 2), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
