"""The command line: bad arguments and bad input give a one-line error and a non-zero exit; every
flag says what it is, one spelling per flag (an old one still works, with a note); --debug shows the
traceback a one-line error stands for."""

import argparse
import os
import signal
import subprocess
import sys

from cli.main import build_parser
from tests.conftest import ROOT, run_corpus


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_flag_of_every_command_says_what_it_is():
    silent = [
        f"{name} {a.option_strings or a.dest}"
        for name, p in subcommands().items()
        for a in p._actions
        if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()
    ]
    assert silent == []


def test_one_spelling_per_flag_across_commands():
    """Inputs are --input, a snapshot to open --snapshot: never --in, never a positional snapshot,
    except as a spelling marked deprecated."""
    for name, p in subcommands().items():
        for a in p._actions:
            deprecated = "deprecated" in (a.help or "")
            assert "--in" not in a.option_strings or deprecated, name
            assert a.option_strings or a.dest != "snapshot" or deprecated, name


def test_a_deprecated_spelling_still_works_and_says_which_to_use(tmp_path):
    proc = run_corpus(
        "stage", "no_such_stage", "--in", str(tmp_path), "--out", str(tmp_path / "o"), check=False
    )
    assert "corpus stage: note: --in is deprecated, say --input" in proc.stderr
    assert "unknown stage 'no_such_stage'" in error_line(proc)


def test_corpus_help_is_for_users_and_version_prints_the_package_s():
    text = run_corpus("--help").stdout
    assert text.splitlines()[2].startswith("Turn web crawls") and "corpus build --input" in text
    assert run_corpus("--version").stdout.startswith("corpus-pipeline ")


def test_debug_shows_the_traceback_behind_a_one_line_error(tmp_path):
    args = ("report", str(tmp_path), "--json")
    plain = run_corpus(*args, check=False)
    assert "Traceback" not in plain.stderr and plain.returncode == 2
    debug = run_corpus("--debug", *args, check=False)
    assert "Traceback (most recent call last)" in debug.stderr and debug.returncode == 2
    assert error_line(debug) == error_line(plain)


def error_line(proc):
    lines = [line for line in proc.stderr.strip().splitlines() if line]
    assert proc.returncode != 0
    return lines[-1]


def test_unknown_stage_names_the_stages_that_exist(tmp_path):
    proc = run_corpus(
        "stage", "no_such_stage", "--input", str(tmp_path), "--out", str(tmp_path / "o"), check=False
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


def test_config_explain_knows_the_keys_outside_every_table():
    assert run_corpus("config", "explain", "seed").stdout.startswith("(top level) seed: int, default 0")
    assert "memory_budget_mb: int" in run_corpus("config", "explain", "memory_budget_mb").stdout


def test_a_reader_that_stops_early_ends_the_command_quietly():
    """``corpus config defaults | head -1``: the command ends as cat and grep end (SIGPIPE), with no
    error line. The pipe's reader is gone before the command has imported anything."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "config", "defaults"],
        stdout=write_end,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    os.close(read_end)
    os.close(write_end)
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (-signal.SIGPIPE, b"")
