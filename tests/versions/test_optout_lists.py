"""An opt-out list is hostnames read from an allowed place: every entry a hostname or an IP address (a bad
one refused in one line naming its index, or its file and line), a list file only under the selection's
own directory or a root in CORPUS_HOSTS_ROOTS, symlinks resolved; what a version records is the checked
list, never a file's bytes (issue 30, item 19)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from corpus.model.errors import UserError
from corpus.select.hosts import ROOTS_ENV, normalize_host
from corpus.select.selection import load_selection, parse_inline
from tests.conftest import run_corpus
from tests.loader.snapshot_factory import write_id_snapshot


@pytest.fixture(autouse=True)
def no_roots(monkeypatch):
    """Only what a test names is an allowed root (the machine's environment never is)."""
    monkeypatch.delenv(ROOTS_ENV, raising=False)


def selection_beside(tmp_path: Path, list_text: str, name: str = "optout.txt") -> Path:
    (tmp_path / name).write_text(list_text)
    (tmp_path / "sel.toml").write_text(f'exclude_hosts_file = "{name}"\n')
    return tmp_path / "sel.toml"


@pytest.mark.parametrize(
    "entry,host",
    [
        ("Example.COM.", "example.com"),
        ("  a.example.org  ", "a.example.org"),
        ("my_site.blogspot.com", "my_site.blogspot.com"),
        ("xn--bcher-kva.de", "xn--bcher-kva.de"),
        ("Bücher.de", "bücher.de"),
        ("localhost", "localhost"),
        ("192.168.0.1", "192.168.0.1"),
        ("2001:DB8::1", "2001:db8::1"),
        ("a" * 63 + ".org", "a" * 63 + ".org"),
    ],
)
def test_a_hostname_or_ip_address_is_kept_as_it_is_matched(entry, host):
    assert normalize_host(entry) == host


@pytest.mark.parametrize(
    "entry",
    [
        "root:x:0:0:root:/root:/bin/bash",
        "*.example.com",
        "https://example.com/",
        "example.com:8080",
        "exa mple.com",
        "a..b",
        "-a.org",
        "a-.org",
        "a" * 64 + ".org",
        ".".join(["abcdefghi"] * 26),
        "ab\u200b.org",
        "bü cher.de",
        "x.org') OR TRUE --",
        "fe80::1%root:x:0:0",
    ],
)
def test_anything_else_is_not_a_hostname(entry):
    assert normalize_host(entry) is None


def test_a_bad_inline_host_is_refused_in_one_line_naming_its_index():
    with pytest.raises(UserError) as e:
        parse_inline('exclude_hosts = ["a.org", "*.b.org"]')
    assert str(e.value) == (
        "selection <inline>: exclude_hosts[1]: '*.b.org' is not a hostname "
        "(a host covers its subdomains: leave out the '*.')"
    )


def test_a_valid_list_keeps_the_id_it_had(tmp_path):
    """Normalization is what it always was: a valid list's canonical form, and so its id, is unchanged."""
    sel = load_selection(selection_beside(tmp_path, "# asked 2026-11-30\nSite1.Example.org.\n\nb.org # x\n"))
    assert sel.exclude_hosts == ("site1.example.org", "b.org")
    assert sel.digest == parse_inline('exclude_hosts = ["b.org", "site1.example.org"]').digest


def test_a_line_that_is_not_a_hostname_is_refused_naming_the_file_and_line(tmp_path):
    path = selection_beside(tmp_path, "a.example.org\n# fine\nroot:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(UserError) as e:
        load_selection(path)
    assert str(e.value) == (
        f"exclude_hosts_file {tmp_path / 'optout.txt'} line 3: "
        "'root:x:0:0:root:/root:/bin/bash' is not a hostname"
    )


@pytest.mark.parametrize(
    "named",
    ["/etc/hostname", "/etc/passwd", "../outside/optout.txt", "link.txt", "/no/such/file"],
)
def test_a_list_file_outside_the_allowed_roots_is_refused_in_one_line(tmp_path, named):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "optout.txt").write_text("a.example.org\n")
    sel_dir = tmp_path / "sel"
    sel_dir.mkdir()
    (sel_dir / "link.txt").symlink_to("/etc/hostname")
    (sel_dir / "sel.toml").write_text(f'exclude_hosts_file = "{named}"\n')
    with pytest.raises(UserError, match=r"outside the allowed roots \(.*/sel\)") as e:
        load_selection(sel_dir / "sel.toml")
    assert "\n" not in str(e.value)


def test_a_root_named_in_the_environment_admits_a_list_an_inline_selection_names(tmp_path, monkeypatch):
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "optout.txt").write_text("a.example.org\n")
    inline = f'exclude_hosts_file = "{lists / "optout.txt"}"'
    with pytest.raises(UserError, match=r"outside the allowed roots \(none\)"):
        parse_inline(inline)
    monkeypatch.setenv(ROOTS_ENV, os.pathsep.join(["relative/ignored", str(lists)]))
    assert parse_inline(inline).exclude_hosts == ("a.example.org",)
    with pytest.raises(UserError, match="must be absolute in an inline selection"):
        parse_inline('exclude_hosts_file = "optout.txt"')
    with pytest.raises(UserError, match="outside the allowed roots"):
        parse_inline('exclude_hosts_file = "/etc/hostname"')


def test_a_fifo_or_a_directory_under_a_root_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name in ("fifo", "dir"):
        (tmp_path / "sel.toml").write_text(f'exclude_hosts_file = "{name}"\n')
        with pytest.raises(UserError, match=f"exclude_hosts_file {tmp_path / name}: "):
            load_selection(tmp_path / "sel.toml")


def test_a_list_that_is_not_utf8_is_refused(tmp_path):
    (tmp_path / "optout.txt").write_bytes(b"a.org\n\xff\xfe\n")
    (tmp_path / "sel.toml").write_text('exclude_hosts_file = "optout.txt"\n')
    with pytest.raises(UserError, match=r"not UTF-8 \(byte 6\)"):
        load_selection(tmp_path / "sel.toml")


def test_checking_without_reading_names_no_file(tmp_path):
    """What a DAG's prepare does on the Airflow worker: the file is on the cluster, the job reads it."""
    assert parse_inline('exclude_hosts_file = "/etc/passwd"', read_files=False).exclude_hosts == ()
    with pytest.raises(UserError, match="exclude_hosts_file must be a path"):
        parse_inline("exclude_hosts_file = 3", read_files=False)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("optout") / "snapshot"
    write_id_snapshot(root, {"web": 2})
    return root


def test_corpus_version_records_the_checked_list_and_refuses_a_system_file(snapshot, tmp_path):
    """End to end: a good list beside its selection becomes the version's hosts; the password file
    named from a selection elsewhere fails in one line, exit 2, with nothing written."""
    good = selection_beside(tmp_path, "# asked\nA.Example.org\n")
    run_corpus("version", str(snapshot), "--select", str(good), "--out", str(tmp_path / "v"))
    manifest = json.loads((tmp_path / "v" / "manifest.json").read_text())
    assert manifest["selection"]["exclude_hosts"] == ["a.example.org"]

    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "sel.toml").write_text('exclude_hosts_file = "/etc/passwd"\n')
    proc = run_corpus(
        "version",
        str(snapshot),
        "--select",
        str(tmp_path / "evil" / "sel.toml"),
        "--out",
        str(tmp_path / "w"),
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "exclude_hosts_file /etc/passwd: outside the allowed roots" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "root:" not in proc.stderr
    assert not (tmp_path / "w").exists()
