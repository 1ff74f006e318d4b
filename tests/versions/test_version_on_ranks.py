"""The version step on N ranks (issue 37, item 5): each rank judges its own shards, the per-language
quantiles and the near-duplicate groups go through exchanges, and the version's bytes (bitmaps,
manifest, id) are those of one process on 1, 2 and 3 ranks, for every kind of selection."""

from __future__ import annotations

import json
import random
from pathlib import Path

import duckdb
import numpy as np
import pytest

from corpus.model.annotations import MINHASH_DEDUP, REPO_CLUSTER, REPO_CLUSTER_SIZE, REPO_RANK
from corpus.model.errors import UserError
from corpus.select.selection import parse_inline
from corpus.version.partition import assign_shards, quantile_disc_index, top_cut
from corpus.version.plan import make_version
from mpi_kernels.kth_select import kth_smallest
from tests.conftest import run_corpus, run_mpi
from tests.versions.test_keep_first_selection import did, doc, write_candidates

#: one selection of each kind the one-process tests exercise
SELECTIONS = [
    "",
    'exclude_hosts = ["optout.org"]\nlangs = ["en", "fr"]',
    "[policy]\nmin_quality = 0.3\n",
    '[[top_fraction]]\nscore = "quality"\nkeep = 0.5\nby_lang = { fr = 0.3, de = 0.9 }\n'
    '[[top_fraction]]\nscore = "extra"\nkeep = 0.6\n',
    'prefer = { books = "newest" }\nmin_scores_by_lang = { en = { quality = 0.2 } }',
    '[[buckets]]\nname = "high"\nwhere = "quality >= q75 AND lang = \'en\'"\n'
    '[[buckets]]\nname = "early"\nwhere = "crawl_date <= q40"\n[[buckets]]\nname = "rest"\n',
    'near_duplicates = "all"\nmax_scores = { quality = 0.8 }',
    'dedup_scope = "per_crawl"\nlangs = ["en", "fr"]',
    # a category blocklist (its file written by the test): a host, and a URL of another host's document
    'exclude_blocklists = { adult = ["{blocklist}"] }\nlangs = ["en", "de"]',
    '[[buckets]]\nname = "none"\nwhere = "quality > 5"\n',  # refused: it keeps nothing
]


def records(n: int, seed: int, clusters: list[str]) -> list[dict]:
    """Documents with tied qualities (one decimal), three languages, an opt-out host, two sources,
    clusters shared with other shards and builds, and code in repository clusters across shards."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kw = {}
        if rng.random() < 0.2:
            rank = rng.choice([0, 1, 2])
            kw["annotations"] = [
                {"stage": MINHASH_DEDUP, "name": REPO_CLUSTER.name, "value": rng.choice(["r1", "r2", "r3"])},
                {"stage": MINHASH_DEDUP, "name": REPO_CLUSTER_SIZE.name, "value": 3},
                {"stage": MINHASH_DEDUP, "name": REPO_RANK.name, "value": rank},
            ]
        out.append(
            doc(
                did(rng.randrange(1, 10**9)),
                cluster=rng.choice([*clusters, "", None, None]),
                quality=round(rng.random(), 1),
                host=rng.choice(["a.org", "b.org", "optout.org"]),
                lang=rng.choice(["en", "en", "fr", "de"]),
                source=rng.choice(["web", "books"]),
                crawl_date=f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                **kw,
            )
        )
    return out


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    """A delta over a base (keep-first across builds), six shards; a score only one shard has."""
    root = tmp_path_factory.mktemp("ranks")
    clusters = [did(10**9 + i) for i in range(12)]
    base = {f"web-0000{i}": records(60, i, clusters) for i in range(3)}
    for r in base["web-00000"]:
        r["scores"]["extra"] = round(random.Random(r["doc_id"]).random(), 2)
    write_candidates(root, "march", base)
    delta = {f"web-0000{i}": records(50 + 10 * i, i, clusters) for i in range(3, 6)}
    return write_candidates(root, "june", delta, base="march")


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def selections(build, tmp_path, monkeypatch) -> list[str]:
    """:data:`SELECTIONS` with the blocklist's file: a listed host of the build, one document's URL,
    and entries the build does not have."""
    url = duckdb.sql(
        f"SELECT min(url) FROM read_parquet('{build}/**/*.parquet') WHERE host = 'b.org'"
    ).fetchall()[0][0]
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "adult.txt").write_text(
        f"# UT1-style\nA.org\nnot-in.example\n{url.split('//')[1]}\n"
    )
    monkeypatch.setenv("CORPUS_HOSTS_ROOTS", str(tmp_path / "lists"))
    return [t.replace("{blocklist}", str(tmp_path / "lists" / "adult.txt")) for t in SELECTIONS]


def one_process(build: Path, out: Path, selections: list[str]) -> list[str | None]:
    ids = []
    for i, toml in enumerate(selections):
        try:
            ids.append(make_version(build, parse_inline(toml), out / str(i)).manifest["snapshot_id"])
        except UserError as e:
            ids.append(f"refused: {e}")
    return ids


def test_every_selection_gives_the_one_process_bytes_on_1_2_and_3_ranks(build, tmp_path, selections):
    expected = one_process(build, tmp_path / "single", selections)
    assert expected[-1].startswith("refused: the selection keeps no document of bucket(s) none")
    assert len(set(expected[:-1])) == len(SELECTIONS) - 1
    blocked = json.loads((tmp_path / "single" / str(len(SELECTIONS) - 2) / "manifest.json").read_text())
    assert blocked["selection"]["blocklists"]["adult"]["hosts"] == ["a.org"]
    assert (
        len(blocked["selection"]["blocklists"]["adult"]["urls"]) == 1 and blocked["blocklisted"]["adult"] > 1
    )
    (tmp_path / "selections.json").write_text(json.dumps(selections))
    worker = str(Path(__file__).with_name("ranks_worker.py"))
    for ranks in (1, 2, 3):
        out = tmp_path / f"ranks{ranks}"
        proc = run_mpi(ranks, worker, str(build), str(tmp_path / "selections.json"), str(out), timeout=600)
        assert json.loads(proc.stdout.splitlines()[-1]) == expected, ranks
        for i, made in enumerate(expected):
            if made.startswith("refused"):
                assert not (out / str(i)).exists()
                continue
            assert tree(out / str(i)) == tree(tmp_path / "single" / str(i)), (ranks, SELECTIONS[i])


def test_corpus_version_on_ranks_prints_the_id_and_writes_the_bytes_of_one_process(build, tmp_path):
    toml = SELECTIONS[5]
    one = run_corpus("version", str(build), "--select-inline", toml, "--out", str(tmp_path / "a" / "v"))
    two = run_corpus(
        "version", str(build), "--select-inline", toml, "--out", str(tmp_path / "b" / "v"), "--ranks", "2"
    )
    assert one.stdout.splitlines()[-1] == two.stdout.splitlines()[-1]
    assert "bucket high: quality >= q75 AND lang = 'en'" in two.stdout
    assert '"peak_rss_mb"' in two.stderr  # the job's line per rank
    assert tree(tmp_path / "a" / "v") == tree(tmp_path / "b" / "v")
    # a retried job over the same version leaves it as it is
    again = run_corpus(
        "version", str(build), "--select-inline", toml, "--out", str(tmp_path / "b" / "v"), "--ranks", "2"
    )
    assert again.stdout.splitlines()[-1] == one.stdout.splitlines()[-1]


# -- the arithmetic that must agree with DuckDB's ------------------------------------------------


def test_the_quantile_position_is_duckdbs():
    con = duckdb.connect()
    rng = random.Random(5)
    for n in (1, 2, 3, 7, 10, 99, 100, 101, 1000, 4321):
        con.execute(f"CREATE OR REPLACE TABLE t AS SELECT range::BIGINT AS x FROM range({n})")
        percents = [
            *range(101),
            12.5,
            33.3,
            66.7,
            99.9,
            0.001,
            *(round(rng.uniform(0, 100), 3) for _ in range(20)),
        ]
        for p in percents:
            got = con.execute("SELECT quantile_disc(x, ?) FROM t", [p / 100]).fetchall()[0][0]
            assert quantile_disc_index(n, p / 100) == got, (n, p)


def test_the_top_cut_is_duckdbs_round():
    con = duckdb.connect()
    for share in (0.0, 0.1, 0.25, 0.3, 0.5, 0.55, 0.7, 0.9, 1.0, 0.49999999999999994):
        for n in (0, 1, 2, 3, 5, 10, 11, 99, 1001):
            assert top_cut(share, n) == con.execute("SELECT round(? * ?)", [share, n]).fetchall()[0][0]


def test_each_shard_has_one_owner_and_each_rank_a_contiguous_run():
    shards = [5, 1, 9, 0, 3, 7]  # each shard's documents
    for size in (1, 2, 3, 4, 8):
        runs = assign_shards(shards, size)
        assert [i for run in runs for i in run] == list(range(len(shards)))
    assert assign_shards(shards, 1) == [tuple(range(6))]


class OneRank:
    """What kth_smallest asks of a communicator, for one rank."""

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's spelling
        return 0

    def allgather(self, x):
        return [x]

    def bcast(self, x, root=0):
        return x


@pytest.mark.parametrize("gather_at", [1, 7, 4096])
def test_the_kth_smallest_is_found_by_pivot_rounds_as_by_sorting(gather_at):
    rng = np.random.default_rng(3)
    values = np.sort(rng.integers(0, 50, 700))  # many ties
    for k in (0, 1, 349, 350, 698, 699):
        assert kth_smallest(OneRank(), values, k, gather_at).value == values[k]
    keys = np.sort(
        np.array([bytes([rng.integers(0, 4), rng.integers(0, 4)]) for _ in range(300)], dtype=object)
    )
    assert kth_smallest(OneRank(), keys, 123, gather_at).value == keys[123]
    with pytest.raises(ValueError):
        kth_smallest(OneRank(), values, 700, gather_at)


KTH_ON_RANKS = """
import numpy as np
from mpi4py import MPI
from mpi_kernels.kth_select import kth_smallest
comm = MPI.COMM_WORLD
rng = np.random.default_rng(11)
parts = [np.sort(rng.integers(0, 40, n)) for n in (0, 300, 57)]  # one rank holds nothing
every = np.sort(np.concatenate(parts))
mine = parts[comm.Get_rank()]
for k in (0, 1, 100, 178, 179, 356):
    got = kth_smallest(comm, mine, k, gather_at=2)
    assert got.value == every[k], (k, got)
    assert parts[got.rank][got.position] == got.value
if comm.Get_rank() == 0:
    print("ok")
"""


def test_the_kth_smallest_across_ranks_is_the_kth_of_all_values():
    assert run_mpi(3, "-c", KTH_ON_RANKS, timeout=300).stdout.split() == ["ok"]


def test_a_rank_without_shards_takes_part_in_every_exchange(tmp_path, monkeypatch):
    clusters = [did(10**9 + i) for i in range(4)]
    build = write_candidates(
        tmp_path, "small", {f"web-0000{i}": records(40, 20 + i, clusters) for i in range(2)}
    )
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "adult.txt").write_text("b.org\n")  # the rank without shards reads it too
    monkeypatch.setenv("CORPUS_HOSTS_ROOTS", str(tmp_path / "lists"))
    blocklist = SELECTIONS[-2].replace("{blocklist}", str(tmp_path / "lists" / "adult.txt"))
    selections = [
        SELECTIONS[0],
        SELECTIONS[3].split('[[top_fraction]]\nscore = "extra"')[0],
        SELECTIONS[5],
        blocklist,
    ]
    expected = [
        make_version(build, parse_inline(t), tmp_path / "one" / str(i)).manifest["snapshot_id"]
        for i, t in enumerate(selections)
    ]
    (tmp_path / "selections.json").write_text(json.dumps(selections))
    worker = str(Path(__file__).with_name("ranks_worker.py"))
    proc = run_mpi(3, worker, str(build), str(tmp_path / "selections.json"), str(tmp_path / "three"))
    assert json.loads(proc.stdout.splitlines()[-1]) == expected
    for i in range(len(selections)):
        assert tree(tmp_path / "three" / str(i)) == tree(tmp_path / "one" / str(i))
