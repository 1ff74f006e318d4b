"""PII scrubbing in place: spans that identify a person or a machine become typed placeholders.

Precision matters as much as recall: a false replacement damages text that identified nobody (a
version string, a Perl package name, an ISBN), and in code or manuals these are everywhere. So every
kind (``email``, ``phone``, ``ip``, ``credit_card``, ``iban``, ``us_ssn``) is a value that can be
validated (a check digit, a known range, an address context), not a digit pattern; overlapping
candidates go to the more structured kind. ``scrub_pii`` returns the replaced text and every
replacement as a span of the *input* text, so a replacement can be audited and undone from the
document it was derived from. Each kind's rule: docs/ingest-and-filters.md ("PII").
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

PLACEHOLDERS = {
    "email": "<EMAIL>",
    "phone": "<PHONE>",
    "ip": "<IP_ADDRESS>",
    "credit_card": "<CREDIT_CARD>",
    "iban": "<IBAN>",
    "us_ssn": "<US_SSN>",
}
KINDS = tuple(PLACEHOLDERS)
#: the kinds a checksum or an unambiguous shape identifies: safe on code and manuals, where digit
#: groups, dotted versions and ``a::b`` names abound and context words cannot be trusted
CODE_SAFE_KINDS = ("email", "credit_card", "iban")
#: when candidates of two kinds overlap, the more structured wins
_PRIORITY = {kind: i for i, kind in enumerate(("email", "iban", "credit_card", "us_ssn", "ip", "phone"))}


@dataclass(frozen=True)
class PiiSpan:
    """``text[start:end]`` of the scanned text is PII of ``kind``."""

    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class Scrubbed:
    text: str
    spans: tuple[PiiSpan, ...]  # in the coordinates of the text that was scrubbed

    def counts(self) -> dict[str, int]:
        return {kind: sum(s.kind == kind for s in self.spans) for kind in KINDS}


# --- email ------------------------------------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+([A-Za-z]{2,24})(?![\w-])"
)
_FILE_EXTENSIONS = frozenset(
    "png jpg jpeg gif svg webp bmp ico css js mjs ts html htm xml json pdf txt rst cpp java rb php "
    "zip gz tgz bz2 xz tar".split()
)


def _emails(text: str):
    for m in _scan(_EMAIL, text):
        if m.group(1).lower() not in _FILE_EXTENSIONS:
            yield m.start(), m.end()


# --- phone ------------------------------------------------------------------------------------------

#: ITU-T E.164 country codes of one and two digits, and the first two digits of the three-digit ones
_CC_SHORT = frozenset(
    "1 7 20 27 30 31 32 33 34 36 39 40 41 43 44 45 46 47 48 49 51 52 53 54 55 56 57 58 60 61 62 63 64 "
    "65 66 81 82 84 86 90 91 92 93 94 95 98".split()
)
_CC_THREE_DIGIT_PREFIXES = frozenset(
    "21 22 23 24 25 26 29 35 37 38 42 50 59 67 68 69 80 85 87 88 96 97 99".split()
)
_INTERNATIONAL = re.compile(r"(?<![\w+])\+\d(?:[ .-]?(?:\(\d{1,4}\)|\d{1,5})){1,7}(?![\w-]|\.\d)")
_NANP = re.compile(
    r"(?<![\w+.-])(?:\([2-9]\d\d\) ?[2-9]\d\d[-. ]\d{4}|[2-9]\d\d([-.])[2-9]\d\d\1\d{4})(?![\w-]|\.\d)"
)
_NATIONAL = re.compile(
    r"(?i:\b(?:tel|t[ée]l[ée]phone|telephone|phone|telefon|tel[ée]fono|fax|mobile|mobil|cell|call)\b)"
    r"\.?[ \t]*(?:\([^)\n]{1,12}\))?[ \t]*[:：]?[ \t]*((?:0\d{1,4}|[2-9]\d\d)(?:[ ./-]\d{2,4}){1,4})(?![\w-]|\.\d)"
)


def _country_code_ok(digits: str) -> bool:
    return digits[:1] in _CC_SHORT or digits[:2] in _CC_SHORT or digits[:2] in _CC_THREE_DIGIT_PREFIXES


def _phones(text: str):
    for m in _scan(_INTERNATIONAL, text):
        digits = re.sub(r"\D", "", m.group(0))
        if 8 <= len(digits) <= 15 and _country_code_ok(digits) and m.group(0).count("(") <= 1:
            yield m.start(), m.end()
    for m in _scan(_NANP, text):
        yield m.start(), m.end()
    for m in _scan(_NATIONAL, text):
        if 9 <= sum(c.isdigit() for c in m.group(1)) <= 12:
            yield m.start(1), m.end(1)


# --- IP addresses -------------------------------------------------------------------------------------

_IPV4 = re.compile(
    r"(?<![\w.-])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w-]|\.\d)"
)
_IPV6 = re.compile(r"(?<![\w:.$@%&*])[23][0-9A-Fa-f]{3}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])")
_ADDRESS_WORDS = re.compile(
    r"(?i)\b(?:ip|ipv4|ips|address(?:es)?|addr|hosts?|hostname|server|client|peer|gateway|dns|"
    r"nameserver|resolver|router|proxy|ping|inet|src|dst|source|destination|remote|connect(?:ed|ing|ion)?|"
    r"login|logged|visitor|adresse|indirizzo|dirección|endereço|адрес)\b"
)
_VERSION_BEFORE = re.compile(
    r"(?i)(?:\b(?:v|ver|version|release|rev|revision|build|patch|level)\s*[:=]?\s*|/)$"
)
_ADDRESS_AFTER = re.compile(r"^(?::\d{1,5}\b|/\d{1,2}\b| - - )")


def _ipv4_in_context(text: str, start: int, end: int) -> bool:
    """An address context: no version word or ``product/`` right before; a URL, ``user@``, ``:port``,
    ``/prefix`` or an access-log line around it, or an address word shortly before."""
    line_start = text.rfind("\n", 0, start) + 1
    before = text[max(line_start, start - 48) : start]
    if before.endswith(("://", "@")) or _ADDRESS_AFTER.match(text[end : end + 8]):
        return True
    if _VERSION_BEFORE.search(before):
        return False
    return bool(_ADDRESS_WORDS.search(before))


def _public(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_global
    except ValueError:
        return False


def _ips(text: str):
    for m in _scan(_IPV4, text):
        if _public(m.group(0)) and _ipv4_in_context(text, m.start(), m.end()):
            yield m.start(), m.end()
    for m in _scan(_IPV6, text):
        written = [g for g in m.group(0).split(":") if g]
        if len(written) >= 3 and _public(m.group(0)):
            yield m.start(), m.end()


# --- card numbers -------------------------------------------------------------------------------------

_CARD = re.compile(r"(?<![\w.-])\d{4}(?:([ -]?)\d{2,6})(?:\1\d{1,6}){0,4}(?![\w-]|[.,]\d)")
#: (prefixes, lengths) of the issuers whose numbers are 12–19 digits (ISO/IEC 7812)
_ISSUERS = (
    (("4",), (13, 16, 19)),  # Visa
    (tuple(str(p) for p in range(51, 56)) + tuple(str(p) for p in range(2221, 2721)), (16,)),  # Mastercard
    (("34", "37"), (15,)),  # American Express
    (("6011", "65") + tuple(str(p) for p in range(644, 650)), (16, 17, 18, 19)),  # Discover
    (tuple(str(p) for p in range(3528, 3590)), (16, 17, 18, 19)),  # JCB
    (("36", "38", "39") + tuple(str(p) for p in range(300, 306)), (14, 15, 16, 17, 18, 19)),  # Diners
    (("62",), (16, 17, 18, 19)),  # UnionPay
    (("50", "56", "57", "58", "63", "67"), (12, 13, 14, 15, 16, 17, 18, 19)),  # Maestro
)
#: digit groupings printed on cards and forms (groups of four; Amex and Diners 4-6-5 / 4-6-4)
_CARD_GROUPS = re.compile(r"^\d{4}(?:[ -]\d{4}){2,3}(?:[ -]\d{1,4})?$|^\d{4}[ -]\d{6}[ -]\d{4,5}$")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def is_card_number(digits: str) -> bool:
    """An issuer's prefix and length, the Luhn check, and not a run of a few repeated digits."""
    issued = any(digits.startswith(prefixes) and len(digits) in lengths for prefixes, lengths in _ISSUERS)
    return issued and luhn_ok(digits) and len(set(digits)) >= 4


def _cards(text: str):
    for m in _scan(_CARD, text):
        s = m.group(0)
        if (s.isdigit() or _CARD_GROUPS.match(s)) and is_card_number(re.sub(r"\D", "", s)):
            yield m.start(), m.end()


# --- IBAN -------------------------------------------------------------------------------------------

#: IBAN length per country (the SWIFT IBAN registry)
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip
_IBAN = re.compile(
    r"(?<![\w-])[A-Z]{2}\d{2}(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,3})?)(?![\w-])"
)


def iban_ok(iban: str) -> bool:
    """The country's length, check digits 02–98 and the mod-97 check (ISO 13616) of a compact IBAN."""
    if IBAN_LENGTHS.get(iban[:2]) != len(iban) or not "02" <= iban[2:4] <= "98":
        return False  # check digits 00, 01 and 99 are never issued
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _ibans(text: str):
    for m in _scan(_IBAN, text):
        if iban_ok(m.group(0).replace(" ", "")):
            yield m.start(), m.end()


# --- US social security numbers -------------------------------------------------------------------

_SSN = re.compile(r"(?<![\w-])(\d{3})-(\d{2})-(\d{4})(?![\w-])")
_SSN_SPACED = re.compile(
    r"(?i:\bssn\b|\bss#|\bsocial security(?: number| no\.?)?)\W{0,3}(\d{3}) (\d{2}) (\d{4})\b"
)
_SSN_ADVERTISED = frozenset({"078051120", "219099999"})


def ssn_ok(area: str, group: str, serial: str) -> bool:
    """Not in a range the SSA never issues (area 000, 666, 9xx; group 00; serial 0000)."""
    return (
        area not in ("000", "666")
        and area[0] != "9"
        and group != "00"
        and serial != "0000"
        and area + group + serial not in _SSN_ADVERTISED
    )


def _ssns(text: str):
    for m in _scan(_SSN, text):
        if ssn_ok(*m.groups()):
            yield m.start(), m.end()
    for m in _scan(_SSN_SPACED, text):
        if ssn_ok(*m.groups()):
            yield m.start(1), m.end(3)


#: what every match of a pattern contains, tested first (each pattern starts with a lookbehind, so the
#: regex engine tries it at every position; these start with a literal or a class, which it skips to):
#: a text without every one of them is not scanned, and the spans found are the same
_GATES: dict[re.Pattern, tuple[re.Pattern, ...]] = {
    _EMAIL: (re.compile("@"),),
    _INTERNATIONAL: (re.compile(r"\+\d"),),
    # [2-9]\d\d[-. ]\d{4} and [2-9]\d\d([-.])[2-9]\d\d\1\d{4}
    _NANP: (re.compile(r"\d\d\d[-. ]\d\d\d\d"),),
    # the number's first group's last digit, then [ ./-]\d{2,4}; a keyword, as the pattern spells it
    _NATIONAL: (re.compile(r"\d[ ./-]\d\d"), re.compile(r"(?i:tel|phone|fax|mobil|cell|call)")),
    _IPV4: (re.compile(r"\.\d{1,3}\.\d{1,3}\.\d"),),  # after the first octet
    _IPV6: (re.compile(r"[23][0-9A-Fa-f]{3}:"),),
    _CARD: (re.compile(r"\d\d\d\d[ -]?\d\d"),),
    _IBAN: (re.compile(r"[A-Z][A-Z]\d\d"),),
    _SSN: (re.compile(r"-\d\d-\d\d\d\d"),),  # after the area
    _SSN_SPACED: (re.compile(r" \d\d \d\d\d\d"),),
}


def _scan(pattern: re.Pattern, text: str):
    """``pattern.finditer(text)``, or nothing where the text lacks what every match contains."""
    return pattern.finditer(text) if all(g.search(text) for g in _GATES[pattern]) else ()


_FINDERS = {
    "email": _emails,
    "phone": _phones,
    "ip": _ips,
    "credit_card": _cards,
    "iban": _ibans,
    "us_ssn": _ssns,
}


def find_pii(text: str, kinds: tuple[str, ...] | list[str] = KINDS) -> list[PiiSpan]:
    """The PII spans of ``text`` of the given kinds, in order and not overlapping (where candidates of
    different kinds overlap, the more structured kind wins, then the longer span)."""
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown PII kinds {sorted(unknown)}; known: {list(KINDS)}")
    candidates = sorted(
        (PiiSpan(start, end, kind) for kind in kinds for start, end in _FINDERS[kind](text)),
        key=lambda s: (_PRIORITY[s.kind], s.start - s.end, s.start),
    )
    chosen: list[PiiSpan] = []
    for span in candidates:
        if all(span.end <= c.start or span.start >= c.end for c in chosen):
            chosen.append(span)
    return sorted(chosen, key=lambda s: s.start)


def scrub_pii(text: str, kinds: tuple[str, ...] | list[str] = KINDS) -> Scrubbed:
    """The text with every PII span of ``kinds`` replaced by its placeholder, and the spans."""
    spans = find_pii(text, kinds)
    parts, at = [], 0
    for s in spans:
        parts += [text[at : s.start], PLACEHOLDERS[s.kind]]
        at = s.end
    parts.append(text[at:])
    return Scrubbed("".join(parts), tuple(spans))
