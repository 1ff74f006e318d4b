"""Repository-level dedup (issue 17 item 5): code documents are clustered as repositories (sets of line
keys, corpus.code.repo_dedup), never as text; every document of a repository carries its cluster; a
version keeps the representative repository whole; the same outputs on 1 and 2 ranks.

Two builds (1 and 2 ranks, module fixture) of four real archives of ../shared/data/code: two releases
of requests, its fork niquests and the unrelated six."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from corpus.code.repo_dedup import (
    document_files,
    estimated_similarity,
    exact_jaccard,
    line_hashes,
    release_key,
    repository_id,
)
from corpus.report.build_view import open_build
from corpus.report.gather import gather
from corpus.report.html import render_html
from corpus.report.repo_clusters import repository_clusters
from corpus.select.selection import Selection
from corpus.version.open import open_version
from corpus.version.query import connect, select_rows
from mpi_kernels.minhash import MinHasher
from tests.code.test_code_rules import linked_inputs
from tests.conftest import run_corpus
from tests.stages.chain import docs, manifest

ARCHIVES = ["requests-2.31.0.tar.gz", "requests-2.32.3.tar.gz", "niquests-3.11.0.tar.gz", "six-1.16.0.tar.gz"]
OLD, NEW, FORK, OTHER = (f"repo://{a.split('.tar')[0]}/" for a in ARCHIVES)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo_dedup")
    inputs = linked_inputs(root, ARCHIVES)
    out = {}
    for ranks in (1, 2):
        out[ranks] = root / f"b{ranks}"
        run_corpus("build", "--input", str(inputs), "--out", str(out[ranks]), "--ranks", str(ranks))
    return out


def by_repository(build: Path) -> dict[str, list]:
    """{repository url: its documents after minhash_dedup, in part order}"""
    out: dict[str, list] = {}
    for d in docs(build / "stages" / "minhash_dedup"):
        out.setdefault(d.url.split("#")[0], []).append(d)
    for v in out.values():
        v.sort(key=lambda d: int(d.annotation("ingest", "repo_part").value.split("/")[0]))
    return out


def cluster_of(d) -> dict:
    names = ("repo_cluster", "repo_cluster_size", "repo_rank", "repo_dup_of")
    notes = {n: d.annotation("minhash_dedup", n) for n in names}
    return {n: a.value for n, a in notes.items() if a is not None}


def test_two_releases_of_requests_are_one_repository_cluster(builds):
    repos = by_repository(builds[1])
    assert len(repos[OLD]) > 1 and len(repos[NEW]) > 1, "both are split into several documents"
    clusters = {url: {json.dumps(cluster_of(d), sort_keys=True) for d in ds} for url, ds in repos.items()}
    assert all(len(c) == 1 for c in clusters.values()), "every part of a repository carries the same cluster"
    new, old = cluster_of(repos[NEW][0]), cluster_of(repos[OLD][0])
    assert new["repo_cluster"] == old["repo_cluster"] and new["repo_cluster_size"] == 2
    # the representative: same tier, 2.32.3 has more files (58 against 40); the other points at it
    assert new["repo_rank"] == 0 and "repo_dup_of" not in new
    assert old["repo_rank"] == 1 and old["repo_dup_of"] == repository_id(NEW).hex()


def test_members_carry_similarity_estimated_and_file_share_exact(builds):
    repos = by_repository(builds[1])
    old, new = repos[OLD], repos[NEW]
    assert new[0].scores["repo_similarity"] == 1.0 and new[0].scores["repo_file_share"] == 1.0
    lines = [np.unique(np.concatenate([line_hashes(document_files(d)) for d in ds])) for ds in (old, new)]
    exact = exact_jaccard(*lines)
    assert 0.85 < exact < 0.97  # measured 0.928: a release moves few lines
    assert abs(old[0].scores["repo_similarity"] - exact) < 0.1  # K = 112: one standard error ~0.03
    # the share of files the two share exactly, from the files themselves: 16 of 82 distinct
    files = [{body for d in ds for _, body in document_files(d)} for ds in (old, new)]
    assert old[0].scores["repo_file_share"] == pytest.approx(
        len(files[0] & files[1]) / len(files[0] | files[1])
    )
    assert old[0].scores["repo_file_share"] < 0.3, "file hashes alone would not see one project here"


def test_the_fork_is_measured_against_requests_and_stays_out_of_its_cluster(builds):
    repos = by_repository(builds[1])
    assert all(not cluster_of(d) for d in repos[FORK] + repos[OTHER])
    hasher = MinHasher()

    def signature(url: str) -> tuple[np.ndarray, np.ndarray]:
        lines = np.unique(np.concatenate([line_hashes(document_files(d)) for d in repos[url]]))
        return lines, hasher.set_signatures(lines, np.array([0, len(lines)]))[0]

    (fork, fork_sig), (new, new_sig), (other, _) = signature(FORK), signature(NEW), signature(OTHER)
    exact = exact_jaccard(fork, new)
    assert 0.3 < exact < 0.5  # measured 0.386: far below the 0.7 threshold
    assert abs(estimated_similarity(fork_sig, new_sig) - exact) < 0.15
    assert exact_jaccard(fork, other) < 0.05


def test_code_documents_never_join_text_clusters(builds):
    repos = by_repository(builds[1])
    assert all(not d.dup_cluster_id and not d.dup_of for ds in repos.values() for d in ds)
    extra = manifest(builds[1] / "stages" / "minhash_dedup")["extra"]
    assert extra["clusters"] == 0 and extra["code_docs"] == sum(len(ds) for ds in repos.values())
    assert extra["repositories"] == 4 and extra["repo_clusters"] == 1
    assert extra["code_docs_in_repo_clusters"] == len(repos[OLD]) + len(repos[NEW])


def test_same_outputs_on_one_and_two_ranks(builds):
    one, two = (manifest(builds[r] / "stages" / "minhash_dedup") for r in (1, 2))
    assert one["outputs"] == two["outputs"] and one["extra"] == two["extra"]
    assert one["stage_version"] == "9+norm2"


def selected_by_repository(build: Path, selection: Selection) -> dict[str, list[bool]]:
    version = open_version(build)
    con = connect(version)
    bits = select_rows(con, selection, {s.name: s.docs for s in version.shards})
    rows = con.execute('SELECT shard, "index", url, repo_rank FROM stored ORDER BY url').fetchall()
    out: dict[str, list[bool]] = {}
    for shard, index, url, _ in rows:
        out.setdefault(url.split("#")[0], []).append(bool(bits[shard][index]))
    return out


def test_a_version_keeps_every_part_of_the_representative_and_none_of_the_other_member(builds):
    kept = selected_by_repository(builds[1], Selection())
    assert kept[NEW] and all(kept[NEW]), "every part of requests 2.32.3"
    assert not any(kept[OLD]), "no part of requests 2.31.0"
    assert all(kept[FORK]) and all(kept[OTHER]), "repositories in no cluster are kept"
    every = selected_by_repository(builds[1], Selection(near_duplicates="all"))
    assert all(every[OLD]) and all(every[NEW])


def test_a_version_excluding_the_representative_keeps_the_next_repository_whole(builds):
    kept = selected_by_repository(builds[1], Selection(exclude_hosts=("requests-2.32.3",)))
    assert not any(kept[NEW]) and kept[OLD] and all(kept[OLD])


def test_newest_release_orders_versions_numerically():
    assert release_key("requests-2.32.3") < release_key("requests-2.31.0") < release_key("requests-2.4.0")
    assert release_key("requests-2.10") < release_key("requests-2.9.9")
    assert release_key("tool") > release_key("tool-0.0.1")


def test_the_card_lists_each_cluster_member_with_its_similarity_and_file_share(builds):
    table = repository_clusters(connect(open_version(builds[1])))
    assert table["clusters"] == 1 and table["repositories"] == 2
    new, old = table["members"]
    assert (new["repository"], new["rank"], new["similarity"]) == (NEW, 0, 1.0)
    assert old["repository"] == OLD and old["rank"] == 1 and 0.8 < old["similarity"] < 1.0
    assert old["file_share"] < 0.3 and old["documents"] == len(by_repository(builds[1])[OLD])
    # and the build's card shows the same table in its code section, with what the version kept
    card = gather(open_build(builds[1]))
    assert [(m["repository"], m["kept"]) for m in card["code"]["repo_clusters"]["members"]] == [
        (NEW, True),
        (OLD, False),
    ]
    assert "<h3>Repository clusters</h3>" in render_html(card) and OLD in render_html(card)


def test_set_signatures_are_exact_and_a_union_is_the_elementwise_minimum():
    hasher = MinHasher()
    p = (1 << 61) - 1
    values = np.array([3, 1 << 40, (1 << 64) - 5, 12345678901234567], dtype=np.uint64)
    got = hasher.set_signatures(values, np.array([0, 2, 4]))
    for d, part in enumerate((values[:2], values[2:])):
        xs = [int(x) & p for x in part]
        want = [min((int(a) * x + int(b)) % p for x in xs) for a, b in zip(hasher.a, hasher.b, strict=True)]
        assert got[d].tolist() == want
    whole = hasher.set_signatures(values, np.array([0, 4]))[0]
    assert np.array_equal(np.minimum(got[0], got[1]), whole), "two parts of a repository sign as one"
    assert (hasher.set_signatures(values[:0], np.array([0, 0]))[0] == p).all(), "an empty set: no band"
