"""The command line: bad arguments and bad input give a one-line error and a non-zero exit."""

from tests.conftest import run_corpus


def error_line(proc):
    lines = [line for line in proc.stderr.strip().splitlines() if line]
    assert proc.returncode != 0
    return lines[-1]


def test_unknown_stage_names_the_stages_that_exist(tmp_path):
    proc = run_corpus(
        "stage", "no_such_stage", "--in", str(tmp_path), "--out", str(tmp_path / "o"), check=False
    )
    assert proc.returncode == 2
    assert "unknown stage 'no_such_stage'" in error_line(proc)


def test_missing_input_is_named(tmp_path):
    proc = run_corpus(
        "build", "--input", str(tmp_path / "nope.warc.gz"), "--out", str(tmp_path / "o"), check=False
    )
    assert proc.returncode == 2
    assert "input not found" in error_line(proc) and "nope.warc.gz" in error_line(proc)


def test_report_on_something_that_is_not_a_build(tmp_path):
    proc = run_corpus("report", str(tmp_path), "--json", check=False)
    assert proc.returncode == 2
    assert "neither a build directory" in error_line(proc)


def test_missing_required_argument_is_a_usage_error():
    proc = run_corpus("build", check=False)
    assert proc.returncode == 2
    assert "--input" in proc.stderr


def test_bad_config_file_is_named(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("this is = = not toml")
    src = tmp_path / "x.jsonl"
    src.write_text("")
    proc = run_corpus(
        "build", "--input", str(src), "--out", str(tmp_path / "o"), "--config", str(bad), check=False
    )
    assert proc.returncode == 2
    assert "not valid TOML" in error_line(proc)


def test_query_and_version_on_something_that_is_not_a_build(tmp_path):
    for args in (
        ("query", str(tmp_path), "SELECT 1"),
        ("version", str(tmp_path), "--select-inline", "", "--dry-run"),
    ):
        proc = run_corpus(*args, check=False)
        assert proc.returncode == 2
        assert "is neither a build, a snapshot nor a version" in error_line(proc)


def test_a_selection_that_is_not_toml_is_named(tmp_path):
    sel = tmp_path / "sel.toml"
    sel.write_text("min_scores = {")
    proc = run_corpus("version", str(tmp_path), "--select", str(sel), "--dry-run", check=False)
    assert proc.returncode == 2 and f"selection {sel}: not TOML" in error_line(proc)
