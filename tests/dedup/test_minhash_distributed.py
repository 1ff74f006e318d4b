"""Components verified across every rank (``hpc_jobs.minhash_dedup.giant``) get the verdicts they get at one
part, byte for byte: the leader rule walked in slices along the rank chain is the one-by-one rule."""

from __future__ import annotations

import random

import numpy as np
import pytest

from corpus.dedup.verify import scan_leaders
from tests.dedup.dedup_corpus import make_doc, perl_sections, write_stage_dir
from tests.dedup.stage_io import kept_docs, manifest, output_digests, run_stage
from tests.dedup.test_minhash_dedup import corpus  # noqa: F401 (a fixture)
from tests.dedup.test_minhash_verify import families

#: facts that name the path, not the verdicts
PATH_FACTS = ("distributed_components", "prepare_digest")


def test_a_bucket_walked_in_pieces_after_the_leaders_so_far_gives_the_whole_walks_pairs():
    rng = np.random.default_rng(7)
    sigs = families(rng, 300)
    k = sigs.shape[1]
    whole, new = scan_leaders(lambda a, b: sigs[a:b], len(sigs), np.empty((0, k), np.uint64), k, 0.65, 8)
    want = {(int(m), int(new[ld])) for ms, lds in whole for m, ld in zip(ms, lds, strict=True)}
    got, leaders, lead_sigs = set(), [], np.empty((0, k), np.uint64)
    for lo, hi in ((0, 1), (1, 50), (50, 51), (51, 300)):  # slices of ranks, each after the last's leaders
        found, fresh = scan_leaders(lambda a, b, lo=lo: sigs[lo + a : lo + b], hi - lo, lead_sigs, k, 0.65, 8)
        leaders += (lo + fresh).tolist()
        lead_sigs = sigs[np.array(leaders, dtype=np.int64)]
        got |= {(lo + int(m), leaders[int(ld)]) for ms, lds in found for m, ld in zip(ms, lds, strict=True)}
    assert leaders == new.tolist() and len(leaders) == 8
    assert got == want and len(got) > 100


def near_copies(shared_data, n=400):
    """A template (60 real words) on ``n`` pages, each with up to a third of its words replaced: pairs
    above and below the threshold in the same buckets, several leaders per bucket, clusters cut apart."""
    rnd = random.Random(11)
    sections = perl_sections(shared_data, min_words=80)
    template = sections[0].split()[:60]
    docs = []
    for i in range(n):
        words = list(template)
        for j in rnd.sample(range(60), rnd.randrange(0, 20)):
            words[j] = f"w{rnd.randrange(10**6)}"
        docs.append(make_doc(" ".join(words), i, quality=rnd.random()))
    return docs + [make_doc(t, n + i) for i, t in enumerate(sections[1:41])]


@pytest.fixture(scope="module")
def near_input(shared_data, tmp_path_factory):
    return write_stage_dir(tmp_path_factory.mktemp("near") / "in", near_copies(shared_data), shards=4)


def verdicts(out):
    return {d.url: (d.dup_of, d.dup_cluster_id, d.dup_cluster_size) for d in kept_docs(out)}


def same_run(a, b):
    da, db = output_digests(a), output_digests(b)
    for d in (da, db):
        d["extra"] = {k: v for k, v in d["extra"].items() if k not in PATH_FACTS}
    return da == db


@pytest.mark.parametrize("extra_cfg", ["", "bucket_cap = 4\nverify_components_above = 2\n"])
def test_distributed_components_get_the_one_part_verdicts(corpus, near_input, extra_cfg, tmp_path):  # noqa: F811
    for name, in_dir in (("planted", corpus[0]), ("near", near_input)):
        outs = {}
        for path, above in (("one_part", 10**9), ("distributed", 1)):
            cfg = tmp_path / f"{name}-{path}.toml"
            cfg.write_text(f"[minhash_dedup]\ndistribute_components_above = {above}\n{extra_cfg}")
            outs[path] = tmp_path / f"{name}-{path}"
            run_stage("minhash_dedup", 3, in_dir, outs[path], cfg)
        extra = manifest(outs["distributed"])["extra"]
        assert extra["distributed_components"] > 0
        assert manifest(outs["one_part"])["extra"]["distributed_components"] == 0
        assert verdicts(outs["distributed"]) == verdicts(outs["one_part"]), name
        assert same_run(outs["distributed"], outs["one_part"]), name
        held = manifest(outs["distributed"])["run_info"]["distributed_verification"]
        assert held["most_band_rows_of_one_component_and_band_on_a_rank"] < held["largest_component"]
        if name == "near" and extra_cfg:
            assert extra["verified_components"] > 0
