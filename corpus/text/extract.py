"""HTML to text, one document at a time, in a worker that can be killed.

``PageExtractor`` is a page's path (``EXTRACTORS``: trafilatura, resiliparse's first pass, or both
with a gate between them). trafilatura keeps headings, lists and tables as plain-text lines. Around
it, per document, never per shard: a size cap before parsing (``cap_html``); a time and a memory limit (``ExtractWorker``: a parse
that passes either costs its document and the worker, never the rank); UTF-8 repair
(``repair_replacement_chars``); invisible text stripped (``strip_invisible``). trafilatura's own
duplicate cache is off: it would make a page's text depend on which pages the same process parsed
before, and so on the rank count. See docs/ingest-and-filters.md ("extract").
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import re
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corpus.select.buckets import Clause
from corpus.select.gate import Gate
from corpus.text.first_pass import LANGUAGE_SIGNALS, first_pass, with_language

#: the trafilatura options of every extraction (the benchmark's bare loop uses the same)
TRAFILATURA_OPTIONS: dict[str, Any] = {
    "output_format": "txt",
    "include_tables": True,
    "include_comments": False,
    "include_images": False,
    "include_links": False,
    "include_formatting": False,
    "deduplicate": False,
    "with_metadata": False,
}

#: invisible characters that carry nothing in extracted text: zero-width space, soft hyphen, bidi marks,
#: embeddings and isolates, word joiners, BOM, Hangul and Khmer fillers, C0 controls. Kept because they
#: change spelling or rendering: ZWNJ and ZWJ (U+200C/D: Persian, Urdu, Indic conjuncts, emoji
#: sequences), variation selectors (U+FE00-FE0F: emoji presentation, CJK variants), the combining
#: grapheme joiner (U+034F) and the Mongolian free variation selectors and vowel separator (U+180B-E).
_INVISIBLE = re.compile(
    "[\u00ad\u061c\u115f\u1160\u17b4\u17b5\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
)


#: format characters trafilatura must not drop (it keeps only what ``str.isprintable`` accepts): they
#: change the spelling of Persian, Urdu and Indic words and join emoji sequences (see ``_INVISIBLE``)
_MEANINGFUL_FORMAT = frozenset("\u200c\u200d\u034f\u180b\u180c\u180d\u180e") | frozenset(
    chr(c) for c in range(0xFE00, 0xFE10)
)


def _printable_or_meaningful(char: str) -> str:
    return char if char.isprintable() or char.isspace() or char in _MEANINGFUL_FORMAT else ""


@functools.cache
def _trafilatura():
    """trafilatura, with its control-character filter keeping ZWJ, ZWNJ and the variation selectors.

    ``trafilatura.utils.remove_control_characters`` maps every character of a line that is not
    printable through ``return_printables_and_spaces``, which drops format characters (category Cf),
    so "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645" lost its ZWNJ and changed spelling. The
    function is looked up in the module at each call, so replacing it there is enough;
    tests/stages/test_extract.py fails if a trafilatura release stops calling it. Its XPaths' regex
    tests are guarded (``guard_regex_tests``) and its parser's element classes found in C
    (``html_class_lookup_in_c``): the same elements and classes, fewer calls into Python."""
    import trafilatura
    import trafilatura.utils
    import trafilatura.xpaths

    trafilatura.utils.return_printables_and_spaces = functools.lru_cache(maxsize=2**14)(
        _printable_or_meaningful
    )
    guard_regex_tests(trafilatura.xpaths)
    trafilatura.utils.HTML_PARSER.set_element_class_lookup(html_class_lookup_in_c())
    return trafilatura


def html_class_lookup_in_c():
    """lxml.html's element classes (``HtmlElement``, and ``FormElement``, ``InputElement``, ... by tag)
    found by lxml in C. ``lxml.html.HtmlElementClassLookup`` is a Python method lxml calls for every
    element object it makes (trafilatura makes millions a crawl file): 4 % of trafilatura's time.
    The HTML parser lower-cases tags, so the same table by tag gives every element the same class (a
    test compares them on real pages and on a form)."""
    from lxml import etree, html

    lookup = etree.ElementNamespaceClassLookup(
        etree.ElementDefaultClassLookup(
            element=html.HtmlElement,
            comment=html.HtmlComment,
            pi=html.HtmlProcessingInstruction,
            entity=html.HtmlEntity,
        )
    )
    by_tag = lookup.get_namespace(None)
    by_tag.update(html.HtmlElementClassLookup()._element_classes)
    return lookup


#: an EXSLT regex test of attributes in trafilatura's XPaths, e.g. ``re:test(@id|@class, 'nav|menu')``
_REGEX_TEST = re.compile(r"re:test\((@[\w-]+(?:\|@[\w-]+)*), *'([^']*)'\)")


def _guarded(m: re.Match[str]) -> str:
    attributes, pattern = m.groups()
    if re.search(pattern, ""):  # it would be true of an element without the attributes: left as it is
        return m.group()
    return f"(({attributes}) and {m.group()})"


def guard_regex_tests(xpaths) -> int:
    """Each ``re:test(@a|@b, 'pattern')`` of the XPath lists of ``xpaths`` (trafilatura's module)
    preceded by ``(@a|@b) and``, in place; returns how many expressions changed.

    Why: libxml2 calls back into Python's ``re`` for every element an expression visits, most of which
    have none of the attributes; a test of no attribute is a test of "", which the guard answers
    instead (a pattern that matches "" is not guarded), so the same elements are selected. trafilatura
    ran ~10 % faster on the shared crawls' pages with the same text (docs/ingest-and-filters.md,
    "extract"); tests/stages/test_extract.py compares every changed expression with the original."""
    from lxml.etree import XPath

    changed = 0
    for value in vars(xpaths).values():
        if not (isinstance(value, list) and value and all(isinstance(x, XPath) for x in value)):
            continue
        for i, x in enumerate(value):
            path = _REGEX_TEST.sub(_guarded, x.path)
            if path != x.path:
                value[i] = XPath(path, namespaces={"re": xpaths.REGEXP_NS})
                changed += 1
    return changed


def extract_text(html: str) -> str:
    """The main text of a page ("" when trafilatura finds none)."""
    return _trafilatura().extract(html, **TRAFILATURA_OPTIONS) or ""


#: the extract stage's paths (``extractor``): trafilatura on every page; resiliparse's first pass only;
#: the first pass on every page and trafilatura on the pages the gate passes
EXTRACTORS = ("trafilatura", "resiliparse", "two_pass")


@dataclass(frozen=True)
class PageText:
    """A page's text, its first-pass signals (None on the trafilatura path; the language only where the
    gate read it or the page failed) and the gate clause it failed (None: it passed, or was not
    gated); a failed page has no text."""

    text: str
    signals: dict[str, str | float] | None = None
    gate_failure: Clause | None = None


@dataclass(frozen=True)
class PageExtractor:
    """One page's extraction on the path ``extractor``, gated by ``gate`` when the page is gated: what
    the extract worker runs (a picklable callable of ``(html, gated)``)."""

    extractor: str
    gate: Gate

    def __call__(self, arg: tuple[str, bool]) -> PageText:
        html, gated = arg
        if self.extractor == "trafilatura":
            return PageText(extract_text(html))
        first = first_pass(html, language=gated and self.gate.reads(LANGUAGE_SIGNALS))
        failed = self.gate.failure(first.signals) if gated else None
        if failed is not None:  # counted in its language: identified now if the gate did not need it
            return PageText("", with_language(first).signals, failed)
        text = first.text if self.extractor == "resiliparse" else extract_text(html)
        return PageText(text, first.signals)


def cap_html(html: str, max_bytes: int) -> tuple[str, int]:
    """The page cut to ``max_bytes`` of UTF-8 (at a character boundary), and its original size if cut."""
    if max_bytes <= 0 or len(html) * 4 <= max_bytes:
        return html, 0
    data = html.encode("utf-8", errors="surrogatepass")
    if len(data) <= max_bytes:
        return html, 0
    return data[:max_bytes].decode("utf-8", errors="ignore"), len(data)


def strip_invisible(text: str) -> tuple[str, int]:
    """Text without the invisible characters of ``_INVISIBLE`` (zero-width space, bidi controls, C0
    controls, ...), and how many were removed; ZWJ, ZWNJ and variation selectors stay."""
    return _INVISIBLE.subn("", text)


def repair_replacement_chars(text: str, max_ratio: float) -> tuple[str, int] | None:
    """Remove U+FFFD left by undecodable bytes; None when they are more than ``max_ratio`` of the text."""
    n = text.count("\ufffd")
    if n == 0:
        return text, 0
    if n > max_ratio * max(len(text), 1):
        return None
    return text.replace("\ufffd", ""), n


def normalize_text(text: str) -> str:
    """Unix newlines, no trailing spaces, at most one blank line in a row, no blank ends."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [ln.rstrip() for ln in text.split("\n")]
    out: list[str] = []
    for ln in lines:
        if ln or (out and out[-1]):
            out.append(ln)
    return "\n".join(out).strip("\n")


# --- the killable worker ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerResult:
    """``status`` is "ok" (``value`` holds the result), "timeout", "memory_limit", "crashed" or "error"
    (``detail`` says why)."""

    status: str
    value: Any = None
    detail: str = ""


#: the worker's exit status when an allocation failed (a MemoryError)
MEMORY_EXIT = 86
#: the worker's data segment is capped (RLIMIT_DATA) at this many times its memory limit: a parse that
#: runs away fails there instead of exhausting the machine, while the limit itself is judged on the
#: peak resident memory, which a library that swallows a failed allocation cannot hide
HARD_LIMIT_FACTOR = 2


def _peak_rss_bytes() -> int:
    """This process's peak resident memory since the last ``_reset_peak_rss`` (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) << 10
    return 0


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Linux: reset VmHWM to the current resident size


def _serve(conn, fn: Callable[[Any], Any], warmup: Any, memory_limit_bytes: int) -> None:
    if warmup is not None:
        fn(warmup)  # import and warm the parser before the first timed call
    if memory_limit_bytes:
        hard = memory_limit_bytes * HARD_LIMIT_FACTOR
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))
    conn.send(("ready", None))
    while True:
        try:
            if memory_limit_bytes:
                _reset_peak_rss()
            arg = conn.recv()
            result = fn(arg)
        except EOFError:
            return
        except MemoryError:  # nothing may be allocated now: the exit status says it
            os._exit(MEMORY_EXIT)
        except Exception as e:  # the document's problem, not the worker's: report it and go on
            conn.send(("error", f"{type(e).__name__}: {e}"[:300]))
            continue
        peak = _peak_rss_bytes() if memory_limit_bytes else 0
        if peak > memory_limit_bytes > 0:
            conn.send(
                (
                    "memory_limit",
                    f"peak resident memory {peak >> 20} MB > memory limit {memory_limit_bytes >> 20} MB",
                )
            )
            return  # a worker that grew this much is replaced
        conn.send(("ok", result))


class ExtractWorker:
    """Runs ``fn(arg)`` in a child process with a time limit and a memory limit (``memory_limit_mb``, 0
    for none: the peak resident memory of one call); a hung, crashed or outgrown child is replaced.

    The child is started with ``spawn`` (a fresh interpreter), which is safe inside an MPI rank where
    ``fork`` would copy the MPI library's state.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any] = extract_text,
        time_limit_s: float = 10.0,
        warmup: Any = "<p>x</p>",
        start_timeout_s: float = 120.0,
        memory_limit_mb: int = 0,
    ) -> None:
        self.fn = fn
        self.time_limit_s = time_limit_s
        self.memory_limit_mb = memory_limit_mb
        self.warmup = warmup
        self.start_timeout_s = start_timeout_s
        self._ctx = multiprocessing.get_context("spawn")
        self._proc = None
        self._conn = None
        self.restarts = 0

    def _start(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_serve, args=(child, self.fn, self.warmup, self.memory_limit_mb << 20), daemon=True
        )
        proc.start()
        child.close()
        if not parent.poll(self.start_timeout_s):
            proc.kill()
            raise RuntimeError(f"extraction worker did not start within {self.start_timeout_s}s")
        parent.recv()
        self._proc, self._conn = proc, parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
            self._conn.close()
        self._proc = self._conn = None
        self.restarts += 1

    def run(self, arg: Any) -> WorkerResult:
        if self._proc is None:
            self._start()
        try:
            self._conn.send(arg)
            if not self._conn.poll(self.time_limit_s):
                self._kill()
                return WorkerResult("timeout", detail=f"no result within {self.time_limit_s}s; worker killed")
            status, value = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as e:
            self._proc.join(timeout=5)
            code = self._proc.exitcode
            self._kill()
            if code == MEMORY_EXIT:
                limit = self.memory_limit_mb * HARD_LIMIT_FACTOR
                return WorkerResult(
                    "memory_limit", detail=f"an allocation failed at the worker's {limit} MB data cap"
                )
            return WorkerResult("crashed", detail=f"worker died ({type(e).__name__}, exit code {code})")
        if status == "ok":
            return WorkerResult("ok", value=value)
        if status == "memory_limit":
            self._kill()
        return WorkerResult(status, detail=value)

    def close(self) -> None:
        if self._proc is not None:
            self._conn.close()
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
            self._proc = self._conn = None

    def __enter__(self) -> ExtractWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
