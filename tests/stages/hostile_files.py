"""Hostile ingest inputs, crafted here (never downloaded): each file with what ingest must make of it.

Issue 30's parser and record cases: a gzip of zeros named ``.warc.gz``, a stream of blank lines, WARC
and JSONL dates in other digits or with a NUL, JSONL fields of the wrong type, a 100 MB JSONL line and
text file, a tar whose pax header claims 300 MB, a pax header of digits, an archive bomb, archives
with too many members, non-UTF-8 names and link targets, a zip with a corrupt LZMA member. Used by
tests/stages/test_hostile_input.py and bench/bench_hostile.py (``run_measured``: a run's peak RSS).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

MB = 1 << 20
PAGE = b"<html><body><p>A page of text about the weather, long enough to be a document.</p></body></html>"
#: the config the hostile inputs are read with: the defaults, but for a member cap the archives can pass
#: cheaply, and the directory declared a repository
CONFIG = """[ingest]
max_archive_members = 100

[[ingest.sources]]
match = "*/linkrepo"
name = "linkrepo"
tier = "code"
kind = "repository"
"""


@dataclass(frozen=True)
class Hostile:
    """One crafted input: what ingest quarantines of it (reason -> count), how many documents it keeps,
    and for a repository the files it rejects by reason."""

    name: str
    quarantined: dict[str, int]
    kept: int = 0
    rejected_files: dict[str, int] = field(default_factory=dict)


def _gzip_repeated(path: Path, block: bytes, times: int) -> None:
    """A gzip of ``block`` ``times`` times, compressed once and its deflate output reused: a
    multi-member gzip, as large decompressed as written out, made in milliseconds."""
    member = gzip.compress(block, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        for _ in range(times):
            f.write(member)


def _warc(records: list[tuple[str, str, bytes]]) -> bytes:
    buf = io.BytesIO()
    w = WARCWriter(buf, gzip=True)
    for url, date, payload in records:
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
        rec = w.create_warc_record(
            url,
            "response",
            payload=io.BytesIO(payload),
            http_headers=http,
            warc_headers_dict={"WARC-Date": date},
        )
        w.write_record(rec)
    return buf.getvalue()


def _pax_member(value_bytes: int) -> tuple[bytes, bytes, int]:
    """A pax extended header of one ``comment`` record whose value is ``value_bytes`` digits: its
    512-byte header, the record's start (``LEN comment=``) and the record's length (the digits and a
    newline follow, written by the caller as a stream)."""
    n = len(b" comment=") + value_bytes + 1
    length = n + len(str(n))
    length = n + len(str(length))
    head = tarfile.TarInfo("././@PaxHeader")
    head.type, head.size = tarfile.XHDTYPE, length
    return head.tobuf(format=tarfile.USTAR_FORMAT), f"{length} comment=".encode(), length


def _write_pax_tar_gz(path: Path, value_bytes: int) -> None:
    header, prefix, length = _pax_member(value_bytes)
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"1" * MB
    with open(path, "wb") as f:
        f.write(z.compress(header + prefix))
        left = length - len(prefix) - 1
        while left > 0:
            f.write(z.compress(chunk[: min(left, MB)]))
            left -= MB
        f.write(z.compress(b"\n" + b"\0" * (-length % 512)))
        f.write(z.compress(_tar_bytes([("pkg/a.py", b"print('a')\n")], end=True)))
        f.write(z.flush())


def _tar_bytes(files: list[tuple[str, bytes]], end: bool = True) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8") as t:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    return data if end else data[: -2 * 512]


def _bomb_tar_gz(path: Path, members: int) -> None:
    """``members`` files of just under 1 MB of Python each (every one within ``max_file_bytes``)."""
    line = b"x = 1  # the same line again\n"
    data = line * (999_000 // len(line))
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with open(path, "wb") as f:
        for i in range(members):
            info = tarfile.TarInfo(f"bomb/m{i:04d}.py")
            info.size = len(data)
            f.write(z.compress(info.tobuf(format=tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)))
        f.write(z.compress(b"\0" * 1024) + z.flush())


def _corrupt_lzma_zip(path: Path) -> None:
    text = "".join(f"def f{i}(x):\n    return x * {i} + {i * i}\n\n" for i in range(400)).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_LZMA) as z:
        z.writestr("pkg/README.md", "A package.\n")
        z.writestr("pkg/mod.py", text)
    data = bytearray(buf.getvalue())
    at = data.index(b"pkg/mod.py") + len("pkg/mod.py") + 200  # inside its compressed bytes
    data[at : at + 64] = bytes(b ^ 0xA5 for b in data[at : at + 64])
    path.write_bytes(bytes(data))


def _link_repository(root: Path) -> None:
    """A directory declared a repository: a good file, a file whose name is not UTF-8, and a link whose
    target is not UTF-8."""
    root.mkdir()
    (root / "main.py").write_text("def main():\n    return 'hello from a kept file'\n")
    with open(os.path.join(os.fsencode(root), b"caf\xe9.py"), "wb") as f:
        f.write(b"x = 1\n")
    os.symlink(b"target-\xff\xfe", os.path.join(os.fsencode(root), b"link"))


def make_all(d: Path) -> list[Hostile]:
    """Write every hostile input into ``d``; returns what ingest must make of each."""
    d.mkdir(parents=True, exist_ok=True)
    _gzip_repeated(d / "zeros.warc.gz", b"\0" * (64 * MB), 16)  # 1 MB on disk, 1 GiB of zeros
    _gzip_repeated(d / "blank-lines.warc.gz", b"\n" * (16 * MB), 16)
    ok = ("https://ok.example/", "2026-03-01T00:00:00Z", PAGE)
    fullwidth = ("https://fw.example/", "２０２６-０１-０１T00:00:00Z", PAGE.replace(b"weather", b"tides"))
    nul = ("https://nul.example/", "2026-01-01T00:00:00\x00Z", PAGE.replace(b"weather", b"moon"))
    (d / "dates.warc.gz").write_bytes(_warc([ok, fullwidth, nul]))
    lines = [
        {"text": "A record with every field right.", "id": 1, "license": "MIT", "date": "2026-01-01"},
        {"text": "A licence object.", "license": {"spdx": "MIT"}},
        {"text": "A date list.", "date": ["2026-01-", "01"]},
        {"text": "A NaN date.", "date": float("nan")},
        {"text": "A date off the calendar.", "date": "2026-13-45"},
        {"text": "A date in fullwidth digits.", "date": "２０２６-０１-０１"},
        {"text": "A date with a NUL.", "date": "2026-01-01\x00"},
    ]
    (d / "fields.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))
    with gzip.open(d / "long-line.jsonl.gz", "wb", compresslevel=1) as f:
        f.write(b'{"text": "A short record before."}\n{"text": "')
        for _ in range(100):
            f.write(b"a" * MB)
        f.write(b'"}\n{"text": "A short record after."}\n')
    _gzip_repeated(d / "big.txt.gz", b"word " * (MB // 5), 500)  # 100 MB of text
    _write_pax_tar_gz(d / "pax-bomb.tar.gz", 300 * 1000 * 1000)
    header, prefix, length = _pax_member(40_000)
    pax = header + prefix + b"1" * (length - len(prefix) - 1) + b"\n" + b"\0" * (-length % 512)
    (d / "pax-digits.tar").write_bytes(pax + _tar_bytes([("pkg/a.py", b"print('a')\n")]))
    _bomb_tar_gz(d / "bomb.tar.gz", 80)
    many = [(f"many/f{i:03d}.py", f"v = {i}\n".encode()) for i in range(101)]
    (d / "many.tar").write_bytes(_tar_bytes(many))
    with zipfile.ZipFile(d / "many.zip", "w") as z:
        for name, data in many:
            z.writestr(name, data)
    odd = "pkg/caf" + b"\xe9".decode("utf-8", "surrogateescape") + ".py"
    good = ("pkg/main.py", b"def main():\n    return 'a kept file beside an odd name'\n")
    (d / "odd-name.tar").write_bytes(_tar_bytes([good, (odd, b"x = 1\n")]))
    _corrupt_lzma_zip(d / "lzma.zip")
    _link_repository(d / "linkrepo")
    return [
        Hostile("zeros.warc.gz", {"header_too_large": 1}),
        Hostile("blank-lines.warc.gz", {"malformed_warc": 1}),
        Hostile("dates.warc.gz", {"invalid_date": 2}, kept=1),
        Hostile("fields.jsonl", {"invalid_license": 1, "invalid_date": 5}, kept=1),
        Hostile("long-line.jsonl.gz", {"record_too_large": 1}, kept=2),
        Hostile("big.txt.gz", {"record_too_large": 1}),
        Hostile("pax-bomb.tar.gz", {"header_too_large": 1}),
        Hostile("pax-digits.tar", {"header_too_large": 1}),
        Hostile("bomb.tar.gz", {"archive_too_large": 1}),
        Hostile("many.tar", {"too_many_members": 1}),
        Hostile("many.zip", {"too_many_members": 1}),
        Hostile("odd-name.tar", {}, kept=1, rejected_files={"non_utf8_name": 1}),
        Hostile("lzma.zip", {"malformed_archive": 1}),
        Hostile("linkrepo", {}, kept=1, rejected_files={"non_utf8_name": 1, "link": 1}),
    ]


_WRAPPER = """import resource, subprocess, sys
r = subprocess.run(sys.argv[1:])
print("peak_rss_kb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(r.returncode)
"""


def run_measured(cmd: list[str], timeout: float = 600, **kw) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``cmd`` under a wrapper process of its own and return it with the peak RSS (MB) of its
    largest process (an MPI rank), which ``RUSAGE_CHILDREN`` of the wrapper reports."""
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *cmd], capture_output=True, text=True, timeout=timeout, **kw
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("peak_rss_kb ")]
    peak = int(lines[-1].split()[1]) / 1024 if lines else float("nan")
    return proc, peak
