"""minhash_dedup writes a cluster member's line without parsing its text: every output line is, byte for
byte, the input document parsed, given its verdict and encoded again (or the input line itself)."""

from __future__ import annotations

import json
import random

from corpus.formats.docshard import iter_lines
from corpus.model import Annotation, Document
from hpc_jobs.minhash_dedup.graph import cluster_member
from hpc_jobs.minhash_dedup.phase import ClusterVerdict
from tests.dedup.dedup_corpus import make_doc, perl_sections, write_stage_dir
from tests.dedup.stage_io import manifest, run_stage


def test_every_line_is_what_parsing_and_annotating_the_input_would_write(shared_data, tmp_path):
    rnd = random.Random(11)
    sections = perl_sections(shared_data, min_words=80)[:120]
    docs = [make_doc(t, i) for i, t in enumerate(sections)]
    for i in range(0, 120, 6):  # near copies of every sixth section, annotated by an earlier stage
        words = sections[i].split()
        words[rnd.randrange(len(words))] = "edited"
        earlier = Annotation("annotate", 'note ,"lang":"xx"', 'a "quoted" value', "info")
        docs.append(make_doc(" ".join(words), 1000 + i, quality=0.5).annotate(earlier, lang="de"))
    in_dir = write_stage_dir(tmp_path / "in", docs, shards=3)
    out = tmp_path / "out"
    run_stage("minhash_dedup", 1, in_dir, out)

    members = 0
    for ref in manifest(out)["outputs"]:
        for line_in, line_out in zip(
            iter_lines(in_dir / ref["path"]), iter_lines(out / ref["path"]), strict=True
        ):
            doc_in, doc_out = (Document.from_dict(json.loads(x)) for x in (line_in, line_out))
            if doc_out.dup_cluster_id == "":
                assert line_out == line_in
                continue
            members += 1
            verdict = ClusterVerdict(doc_out.dup_cluster_id, doc_out.dup_cluster_size, doc_out.dup_of)
            annotation, fields = cluster_member(verdict)
            assert line_out == doc_in.annotate(annotation, **fields).to_json_bytes()
    assert members >= 40
