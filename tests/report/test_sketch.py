"""The value sketch behind every distribution on the card: bounded error, mergeable, honest histograms."""

from __future__ import annotations

import random

import pytest

from corpus.report.sketch import Sketch


def sketch_of(values) -> Sketch:
    s = Sketch()
    for v in values:
        s.add(v)
    return s


def test_quantiles_are_within_one_percent_relative_error():
    rng = random.Random(7)
    values = sorted(rng.lognormvariate(5, 2) for _ in range(20_000))
    s = sketch_of(values)
    for q in (0.01, 0.25, 0.5, 0.9, 0.99):
        exact = values[int(q * (len(values) - 1))]
        assert s.quantile(q) == pytest.approx(exact, rel=0.011)
    assert (s.min, s.max, s.count) == (values[0], values[-1], len(values))


def test_merging_two_sketches_equals_sketching_everything():
    a, b = [i / 7 for i in range(1000)], [-i / 3 for i in range(500)] + [0.0] * 20
    merged = sketch_of(a)
    merged.merge(sketch_of(b))
    whole = sketch_of(a + b).to_dict()
    got = merged.to_dict()
    assert got.pop("sum") == pytest.approx(whole.pop("sum"))
    assert got == whole
    assert Sketch.from_dict(merged.to_dict()).to_dict() == merged.to_dict()


def test_histogram_keeps_every_document_and_has_no_comb_of_empty_bins():
    s = sketch_of([i / 999 for i in range(1000)])  # uniform on [0, 1]
    edges, counts = s.histogram(bins=40)
    assert len(edges) == 41 and sum(counts) == pytest.approx(1000, abs=0.1)
    assert min(counts[1:]) > 15  # every bin of a uniform distribution is filled


def test_histograms_on_a_shared_range_line_up():
    wide, narrow = sketch_of([0.1, 0.5, 0.9]), sketch_of([0.5])
    e1, _ = wide.histogram(bins=4, lo=0.0, hi=1.0)
    e2, c2 = narrow.histogram(bins=4, lo=0.0, hi=1.0)
    assert e1 == e2 and c2 == [0.0, 0.0, 1.0, 0.0]


def test_nan_and_infinity_are_not_values():
    s = sketch_of([1.0, float("nan"), float("inf")])
    assert s.count == 1
