"""Records ingest read that were not documents: shown on the data card by reason, and watched by the
yield alarms, so a crawl that turns into 403 pages alarms even though no document count reconciles
any worse."""

from __future__ import annotations

from corpus.report.alarms import check_build
from corpus.report.build_view import open_build
from corpus.report.gather import gather
from corpus.report.html import render_html
from tests.stages.chain import run_stage
from tests.stages.warc_fixtures import real_pages, warc_bytes


def crawl(build, pages, forbidden: int) -> None:
    """An ingest-only build of a real crawl whose first ``forbidden`` responses came back 403."""
    (build / "in").mkdir(parents=True)
    data = warc_bytes(pages[:forbidden], status="403 Forbidden") + warc_bytes(pages[forbidden:])
    (build / "in" / "crawl.warc.gz").write_bytes(data)
    run_stage("ingest", 1, [build / "in"], build / "stages" / "ingest")


def test_a_crawl_that_turns_into_403s_alarms_and_the_card_shows_its_skipped_records(tmp_path, shared_data):
    pages = real_pages(shared_data, 20, part=1)
    crawl(tmp_path / "builds" / "healthy", pages, forbidden=1)
    crawl(tmp_path / "builds" / "forbidden", pages, forbidden=18)
    history = tmp_path / "history.jsonl"
    assert check_build(tmp_path / "builds" / "healthy", history) == []

    alarms = {a.metric: a for a in check_build(tmp_path / "builds" / "forbidden", history)}
    assert {"ingest_records", "ingest_records/response_status_*"} <= set(alarms)
    assert alarms["ingest_records/response_status_*"].value == 90.0  # 18 of 20 records
    assert alarms["ingest_records/response_status_*"].median == 5.0

    card = gather(open_build(tmp_path / "builds" / "forbidden"), history)
    assert card["skipped"]["ingest"] == {
        "records_read": 20,
        "documents": 2,
        "skipped": 18,
        "by_reason": {"response_status_403": {"records": 18, "share": 90.0}},
    }
    html = render_html(card)
    assert "Skipped records" in html and "response_status_403" in html and "90.0%" in html
