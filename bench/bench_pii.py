"""Benchmark: precision and recall of the PII scrub per kind, on real text with planted PII, next to
datatrove's PII formatter on the same text.

    python bench/bench_pii.py [--data ../shared/data] [--pages 150] [--code-files 150] [--per-kind 600] [--seed 0]

The text is real: pages of the shared crawls (13 languages, extracted as the extract stage does), the
Perl manuals of the curated tier, and source files of the code archives. Into it are planted, at
paragraph boundaries, valid values of every kind (generated: Luhn-valid card numbers with issuer
prefixes, mod-97-valid IBANs, SSNs outside the never-issued ranges, global IP addresses, phone numbers
in international, North-American and spaced national forms), each in a sentence that could carry it,
and as many look-alikes that are not PII (version strings and user agents, ``Foo::Bar`` names, ISBNs,
Luhn-failing and repeated-digit card-like numbers, IBANs with a wrong check, SSNs in never-issued
ranges, tables of numbers).

Scoring, per kind: a detection of that kind overlapping a planted value of that kind is a true
positive; a planted value no detection overlaps is a false negative; every other detection is a false
positive — including those in the unplanted real text, except the hand-reviewed real addresses listed
in ``REVIEWED_REAL_PII`` (the Perl manuals quote an Apache access log). E-mail addresses already in the
text (the Perl manuals' authors) are replaced by a name before planting, so every e-mail found is
either planted or false.

datatrove's ``PIIFormatter`` replaces e-mails and IPv4 addresses only; its spans are its own regexes'
matches with its own validator (the IP pass runs after e-mails are replaced; here IP matches inside an
e-mail match are dropped, which is the same). Kinds it does not handle are "—".

Last, the Perl manuals are scanned unmodified, as the annotate stage does for the curated tier (the
code-safe kinds) and with every kind, and each non-e-mail replacement is printed.
"""

from __future__ import annotations

import argparse
import gzip
import ipaddress
import json
import random
import re
import sys
import tarfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus.signals.pii import CODE_SAFE_KINDS, IBAN_LENGTHS, KINDS, find_pii, luhn_ok  # noqa: E402
from corpus.text.extract import extract_text, normalize_text, strip_invisible  # noqa: E402
from corpus.text.warc import RawRecord, decode_page, iter_warc  # noqa: E402

#: the public IPv4 addresses quoted in the Perl manuals: an Apache access log (perlfaq) and
#: "an address like 207.171.7.72" (real addresses, in an address context)
PERL_DOC_ADDRESSES = {
    "151.56.71.198",
    "217.113.68.60",
    "195.24.196.99",
    "80.247.140.134",
    "196.201.92.41",
    "207.171.7.72",
}
#: real PII already in the shared data's text (everything found there but e-mail addresses, each
#: looked at by hand): public addresses in an address context
REVIEWED_REAL_PII = {
    "ip": {
        # perl-doc: an Apache access log's clients and "an address like 207.171.7.72"
        *PERL_DOC_ADDRESSES,
        # harden-doc: the firewall example's public network 62.3.3.0/24 (router, bridge, web servers)
        *("62.3.3.0", "62.3.3.25", "62.3.3.26", "62.3.3.27", "62.3.3.28"),
    },
}
CODE_SUFFIXES = (".py", ".js", ".c", ".h", ".md", ".rst", ".txt", ".cfg", ".toml", ".ini")


@dataclass(frozen=True)
class Planted:
    start: int
    end: int
    kind: str
    pii: bool  # False: a look-alike that must not be replaced


# --- real text ------------------------------------------------------------------------------------


def web_texts(data: Path, n: int, per_site_share: int = 30) -> list[str]:
    """Extracted text of ``n`` pages of the first crawl, as the extract stage makes it, at most
    ``n // per_site_share`` (and 2) a site so every language is in. bench_heuristics reads it too."""
    per_site: Counter = Counter()
    out = []
    for part in sorted((data / "warc").glob("crawl-2026-03-part*.warc.gz")):
        for rec in iter_warc(part):
            if not isinstance(rec, RawRecord):
                continue
            site = rec.url.split("/")[2]
            if per_site[site] >= max(2, n // per_site_share):
                continue
            html = decode_page(rec.payload, rec.content_type).text
            text = normalize_text(strip_invisible(extract_text(html))[0])
            if text:
                per_site[site] += 1
                out.append(text)
            if len(out) == n:
                return out
    return out


def perl_texts(data: Path) -> list[str]:
    with gzip.open(data / "curated" / "perl-doc.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def code_texts(data: Path, n: int) -> list[str]:
    """Up to ``n`` source and documentation files, spread over the code archives."""
    archives = sorted((data / "code").glob("*.t*gz"))
    out = []
    for archive in archives:
        with tarfile.open(archive) as tar:
            members = [
                m
                for m in tar.getmembers()
                if m.isfile() and m.name.endswith(CODE_SUFFIXES) and m.size < 100_000
            ]
            for m in sorted(members, key=lambda m: m.name)[: max(1, n // len(archives))]:
                raw = tar.extractfile(m).read()
                try:
                    out.append(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    continue
    return out[:n]


# --- generated values -------------------------------------------------------------------------------


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def _luhn_complete(rng: random.Random, prefix: str, length: int) -> str:
    body = prefix + _digits(rng, length - len(prefix) - 1)
    return next(body + d for d in "0123456789" if luhn_ok(body + d))


def _luhn_broken(digits: str) -> str:
    """The number with its check digit off by one, so it fails the Luhn check."""
    return digits[:-1] + str((int(digits[-1]) + 1) % 10)


def card_number(rng: random.Random) -> str:
    prefix, length = rng.choice(
        [("4", 16), ("4", 13), ("51", 16), ("55", 16), ("2221", 16), ("2720", 16), ("34", 15), ("37", 15),
         ("6011", 16), ("65", 16), ("3530", 16), ("36", 14), ("62", 16), ("62", 19)]
    )  # fmt: skip
    while True:
        digits = _luhn_complete(rng, prefix, length)
        if len(set(digits)) >= 4:
            break
    style = rng.choice(["compact", " ", "-"])
    if style == "compact":
        return digits
    if length == 15:
        return style.join([digits[:4], digits[4:10], digits[10:]])
    return style.join(digits[i : i + 4] for i in range(0, length, 4))


def iban(rng: random.Random) -> str:
    country = rng.choice(["DE", "GB", "FR", "NL", "ES", "IT", "CH", "BE", "PL", "SE", "AT", "IE"])
    n = IBAN_LENGTHS[country] - 4
    letters = {"GB": 4, "NL": 4, "IE": 4, "IT": 1}.get(country, 0)
    bban = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(letters)) + _digits(
        rng, n - letters
    )
    check = 98 - int("".join(str(int(c, 36)) for c in bban + country + "00")) % 97
    value = f"{country}{check:02d}{bban}"
    return value if rng.random() < 0.5 else " ".join(value[i : i + 4] for i in range(0, len(value), 4))


def ssn(rng: random.Random) -> str:
    while True:
        area = rng.randint(1, 899)
        if area != 666:
            return f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


def ipv4(rng: random.Random) -> str:
    while True:
        a = ipaddress.IPv4Address(rng.getrandbits(32))
        if a.is_global and not a.is_multicast:
            return str(a)


def ipv6(rng: random.Random) -> str:
    groups = [f"{rng.choice([0x2001, 0x2A00, 0x2A02, 0x2600, 0x2C0F, 0x2400]) + rng.randint(0, 0xF):x}"]
    groups += [f"{rng.getrandbits(16):x}" for _ in range(7)]
    if rng.random() < 0.5:
        return ":".join(groups)
    return ":".join(groups[:4]) + "::" + groups[7]


def phone(rng: random.Random) -> tuple[str, str]:
    """A (sentence template, number) pair: spaced national forms only come after a word for phone."""
    d = lambda n: _digits(rng, n)  # noqa: E731
    area, exchange = f"{rng.randint(2, 9)}{d(2)}", f"{rng.randint(2, 9)}{d(2)}"
    return rng.choice(
        [
            ("Call {} for an appointment.", f"+44 20 {d(4)} {d(4)}"),
            ("Appelez le {} en semaine.", f"+33 {rng.randint(1, 9)} {d(2)} {d(2)} {d(2)} {d(2)}"),
            ("Telefon: {}", f"+49 30 {d(8)}"),
            ("Rufen Sie {} an.", f"+49 (0)89 {d(4)} {d(4)}"),
            ("Our office: {}.", f"+1 ({area}) {exchange}-{d(4)}"),
            ("Questions? {} (toll free).", f"({area}) {exchange}-{d(4)}"),
            ("Fax {} to the registrar.", f"{area}-{exchange}-{d(4)}"),
            ("Reach the desk at {}.", f"{area}.{exchange}.{d(4)}"),
            ("電話 {} まで", f"+81 3-{d(4)}-{d(4)}"),
            ("WhatsApp {}", f"+91 {rng.randint(6, 9)}{d(4)} {d(5)}"),
            ("Ligue para {}.", f"+55 11 9{d(4)}-{d(4)}"),
            ("Tel. {}", f"020 {d(4)} {d(4)}"),
            ("Téléphone : {}", f"0{rng.randint(1, 9)} {d(2)} {d(2)} {d(2)} {d(2)}"),
            ("phone {}", f"{area} {exchange} {d(4)}"),
        ]
    )


TEMPLATES = {
    "email": ["Contact {} for details.", "Mail: <{}>", "Patches go to {}.", "(reported by {})"],
    "ip": [
        "Connection from {} refused.",
        "The server at {} did not answer.",
        "IP address: {}",
        "See http://{}/index.html for the mirror.",
        "Point the proxy to {}:8080.",
        '{} - - [08/Feb/2007:12:00:00 +0000] "GET / HTTP/1.1" 200 512',
        "ssh login from {} failed",
        "The client {} connected twice.",
    ],
    "credit_card": ["Card number: {}", "Paid with {} on Friday.", "{} exp 12/27"],
    "iban": ["IBAN: {}", "Please transfer the fee to {}.", "Account {} (Sparkasse)"],
    "us_ssn": ["SSN: {}", "Her social security number is {}.", "Employee 17, {}, hired 2019."],
}


def email(rng: random.Random) -> str:
    first = rng.choice(["anna", "j.smith", "li.wei", "mohamed", "o'neil", "sato_k", "dev-team", "x"])
    domain = rng.choice(
        ["mailhost.org", "uni-bonn.de", "example-corp.co.uk", "post.cz", "163.com", "gmx.net"]
    )
    return f"{first}{rng.randint(1, 999)}@{domain}"


def pii_value(rng: random.Random, kind: str) -> tuple[str, str]:
    """(sentence template, value) of a valid value of ``kind``."""
    if kind == "phone":
        return phone(rng)
    if kind == "ip" and rng.random() < 0.25:  # an IPv6 address takes brackets before a port or in a URL
        template = rng.choice(TEMPLATES["ip"])
        return template.replace("{}:", "[{}]:").replace("://{}", "://[{}]"), ipv6(rng)
    value = {
        "email": email,
        "ip": ipv4,
        "credit_card": card_number,
        "iban": iban,
        "us_ssn": ssn,
    }[kind](rng)
    return rng.choice(TEMPLATES[kind]), value


def look_alike(rng: random.Random, kind: str) -> tuple[str, str]:
    """(sentence template, value) of something shaped like ``kind`` that identifies nobody."""
    d = lambda n: _digits(rng, n)  # noqa: E731
    version = f"{rng.randint(1, 9)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}.{rng.randint(0, 99)}"
    options = {
        "ip": [
            ("Mozilla/5.0 (X11; Linux x86_64; rv:1.8.1.1) Gecko/20061204 {}", f"Firefox/{version}"),
            ("Upgrade to at least version {}.", version),
            ("xlC.C   {}  COMMITTED  C for AIX", version),
            (
                "use C<{}> for compound names",
                rng.choice(["$A::B", "B::C", "DB::DB", "a::b", "Foo::Bar::baz"]),
            ),
            ("the LAN host {}", f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}"),
            (
                "Chrome/{} Safari/537.36",
                f"{rng.randint(90, 130)}.0.{rng.randint(1000, 6000)}.{rng.randint(10, 200)}",
            ),
        ],
        "credit_card": [
            ("large ranges like 1..{} no longer crash", "1" + "0" * 12),
            ("{} zeros", "0" * 13),
            ("ISBN {} [ebook]", f"978-{rng.randint(0, 1)}-{d(3)}-{d(5)}-{rng.randint(0, 9)}"),
            (
                "order {}",
                _luhn_broken(_luhn_complete(rng, "4", 16)),
            ),
            ("test card {}", "4111 1111 1111 1111"),
            ("build {}", d(15)),
        ],
        "iban": [
            ("ref {}", "DE00" + d(18)),
            ("code {}", rng.choice(["ISO8859", "UTF16LE", "AB12CDEF3456"])),
        ],
        "us_ssn": [
            ("SSN: {}", f"{rng.choice(['000', '666', '9' + d(2)])}-{d(2)}-{d(4)}"),
            ("part {}", f"{d(3)}-00-{d(4)}"),
            ("released {}", f"20{rng.randint(10, 26)}-0{rng.randint(1, 9)}-{rng.randint(10, 28)}"),
        ],
        "phone": [
            ("free: {}", "8     16    32    64    128  256 512 1024 2048 4096 8192"),
            ("range {}", f"{d(3)} {d(3)} {d(4)}"),
            ("id {}", f"{d(3)}-{d(3)}-{d(4)}".replace("-", "_")),
            ("x = {};", f"{rng.randint(1, 9)}+{d(9)}"),
        ],
        "email": [
            ("the image {}", f"icon@{rng.randint(2, 3)}x.png"),
            ("my @list = (1); push @list, {};", "$x"),
            ("git tag {}", f"v{rng.randint(1, 9)}.{rng.randint(0, 9)}@{d(7)}"),
        ],
    }[kind]
    return rng.choice(options)


#: the sentence of the context-free probe: no word says what the value is
NEUTRAL = "The value {} was listed."


def plant(
    texts: list[str], rng: random.Random, per_kind: int, neutral: bool = False
) -> list[tuple[str, list[Planted]]]:
    """The texts with ``per_kind`` values and ``per_kind`` look-alikes of each kind planted, spread
    round-robin over the texts at paragraph (or line) boundaries; ``neutral`` puts each value in the
    ``NEUTRAL`` sentence instead of one that says what it is."""
    items = [(kind, True) for kind in KINDS for _ in range(per_kind)]
    items += [(kind, False) for kind in KINDS for _ in range(per_kind)]
    rng.shuffle(items)
    per_text: dict[int, list[tuple[str, bool]]] = defaultdict(list)
    for i, item in enumerate(items):
        per_text[i % len(texts)].append(item)
    out = []
    for i, text in enumerate(texts):
        lines = text.rstrip("\n").split("\n")
        inserts = defaultdict(list)
        for kind, pii in per_text[i]:
            template, value = pii_value(rng, kind) if pii else look_alike(rng, kind)
            if neutral and pii:
                template = NEUTRAL
            inserts[rng.randint(0, len(lines))].append((template, value, kind, pii))
        parts, planted, pos = [], [], 0
        for j in range(len(lines) + 1):
            for template, value, kind, pii in inserts.get(j, []):
                before, after = template.split("{}")
                planted.append(Planted(pos + len(before), pos + len(before) + len(value), kind, pii))
                sentence = before + value + after + "\n"
                parts.append(sentence)
                pos += len(sentence)
            if j < len(lines):
                line = lines[j] + "\n"
                parts.append(line)
                pos += len(line)
        out.append(("".join(parts), planted))
    return out


# --- systems -------------------------------------------------------------------------------------


def ours(text: str) -> list[tuple[int, int, str]]:
    return [(s.start, s.end, s.kind) for s in find_pii(text)]


def datatrove_detector():
    from datatrove.pipeline.formatters.pii import PIIFormatter

    fmt = PIIFormatter()

    def detect(text: str) -> list[tuple[int, int, str]]:
        emails = [(m.start(), m.end(), "email") for m in fmt.emails_replacer.regex.finditer(text)]
        ips = [
            (m.start(), m.end(), "ip")
            for m in fmt.ip_replacer.regex.finditer(text)
            if fmt.ip_replacer.validator(m.group(0))
            and not any(s < m.end() and m.start() < e for s, e, _ in emails)
        ]
        return emails + ips

    return detect, ("email", "ip")


def score(docs, detect):
    """Per kind tp/fp/fn counts, the false and missed detections' contexts, and the CPU seconds."""
    stats: dict[str, Counter] = defaultdict(Counter)
    false: dict[str, list[str]] = defaultdict(list)
    missed: dict[str, list[str]] = defaultdict(list)
    t0 = time.process_time()
    found_all = [detect(text) for text, _ in docs]
    cpu = time.process_time() - t0
    for (text, planted), found in zip(docs, found_all, strict=True):
        matched = set()
        for start, end, kind in found:
            hit = next(
                (
                    i
                    for i, p in enumerate(planted)
                    if p.pii and p.kind == kind and p.start < end and start < p.end
                ),
                None,
            )
            if hit is not None:
                if hit not in matched:
                    stats[kind]["tp"] += 1
                    matched.add(hit)
            elif text[start:end] in REVIEWED_REAL_PII.get(kind, ()):
                stats[kind]["real"] += 1
            else:
                stats[kind]["fp"] += 1
                false[kind].append(text[max(0, start - 30) : end + 10].replace("\n", " "))
        for i, p in enumerate(planted):
            if p.pii:
                stats[p.kind]["planted"] += 1
                if i not in matched:
                    stats[p.kind]["fn"] += 1
                    missed[p.kind].append(text[max(0, p.start - 30) : p.end + 10].replace("\n", " "))
    return stats, false, missed, cpu


def _row(kind: str, c: Counter | None) -> str:
    if c is None:
        return "—"
    tp, fp, fn = c["tp"], c["fp"], c["fn"]
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    return f"{p:.3f} | {r:.3f} | {tp} / {fp} / {fn}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--pages", type=int, default=150)
    ap.add_argument("--code-files", type=int, default=150)
    ap.add_argument("--per-kind", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    email_re = re.compile(
        r"\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*"
        r"[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    )  # datatrove's: the real addresses already in the text become a name
    perl = perl_texts(args.data)
    corpora = {
        "web": web_texts(args.data, args.pages),
        "perl-doc": perl,
        "code": code_texts(args.data, args.code_files),
    }
    base = [email_re.sub("someone", t) for texts in corpora.values() for t in texts]
    docs = plant(base, random.Random(args.seed), args.per_kind)
    mb = sum(len(t.encode()) for t, _ in docs) / 1e6
    print(
        f"{len(docs)} texts ({', '.join(f'{len(v)} {k}' for k, v in corpora.items())}), {mb:.1f} MB; "
        f"{args.per_kind} values and {args.per_kind} look-alikes planted per kind; seed {args.seed}\n"
    )
    dt_detect, dt_kinds = datatrove_detector()
    results = {"ours": score(docs, ours), "datatrove": score(docs, dt_detect)}
    handled = {"ours": KINDS, "datatrove": dt_kinds}
    print("| kind | ours: precision | recall | TP / FP / FN | datatrove: precision | recall | TP / FP / FN |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in KINDS:
        dt = results["datatrove"][0][kind] if kind in dt_kinds else None
        print(
            f"| {kind} | {_row(kind, results['ours'][0][kind])} | {_row(kind, dt) if dt else '— | — | —'} |"
        )
    for name, (*_, cpu) in results.items():
        print(f"\n{name}: {mb / cpu:.2f} MB per CPU-second")
    for name, (stats, false, missed, _) in results.items():
        real = {k: c["real"] for k, c in stats.items() if c["real"]}
        print(f"\n{name}: reviewed real PII found in the unplanted text: {real or 'none'}")
        for what, examples_of in (("false", false), ("missed", missed)):
            for kind in sorted(set(examples_of) & set(handled[name])):
                examples = examples_of[kind]
                print(f"{name}: {what} {kind} ({len(examples)}):", *map(repr, examples[:8]), sep="\n    ")

    probe = plant(base, random.Random(args.seed + 1), args.per_kind, neutral=True)
    print(f"\nThe cost of context rules: values in the sentence {NEUTRAL!r} (recall only)\n")
    print("| kind | ours: recall | datatrove: recall |")
    print("|---|---:|---:|")
    probed = {"ours": score(probe, ours)[0], "datatrove": score(probe, dt_detect)[0]}
    for kind in KINDS:
        cells = [
            f"{c['tp'] / c['planted']:.3f}" if name == "ours" or kind in dt_kinds else "—"
            for name, c in ((n, probed[n][kind]) for n in ("ours", "datatrove"))
        ]
        print(f"| {kind} | {' | '.join(cells)} |")

    print("\nThe Perl manuals, unmodified (replacements other than e-mail addresses):")
    for label, kinds in (("code-safe kinds (the curated default)", CODE_SAFE_KINDS), ("every kind", KINDS)):
        counts: Counter = Counter()
        shown = []
        for text in perl:
            for s in find_pii(text, kinds):
                counts[s.kind] += 1
                if s.kind != "email":
                    shown.append(f"{s.kind}: {text[max(0, s.start - 40) : s.end + 12]!r}")
        print(f"  {label}: {dict(sorted(counts.items()))}", *shown, sep="\n    ")


if __name__ == "__main__":
    main()
