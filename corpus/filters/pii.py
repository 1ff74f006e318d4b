"""PII scrubbing in place: spans that identify a person or a machine become typed placeholders.

Emails, phone numbers, public IP addresses (private, loopback and documentation ranges are left as
they are: they identify nobody) and credit-card-like numbers (13–19 digits passing the Luhn check).
The document stays; the counts are recorded so the policy (or a reader) can see what was replaced.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter

PLACEHOLDERS = {"email": "<EMAIL>", "phone": "<PHONE>", "ip": "<IP_ADDRESS>", "credit_card": "<CREDIT_CARD>"}

_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"
)
_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
_IPV4 = re.compile(
    r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\d.]|\.\d)"
)
_IPV6 = re.compile(
    r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}(?![\w:])|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}:(?:[0-9A-Fa-f]{1,4}:){0,5}[0-9A-Fa-f]{1,4}(?![\w:])"
)
# an international number (+CC ...) or a North-American style (NNN) NNN-NNNN / NNN-NNN-NNNN
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]\d{2,4}){2,4}"
    r"|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}|\d{3}[.-]\d{3}[.-]\d{4})(?![\w])"
)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _public_ip(s: str) -> bool:
    try:
        return ipaddress.ip_address(s).is_global
    except ValueError:
        return False


def scrub_pii(text: str) -> tuple[str, dict[str, int]]:
    """The text with PII spans replaced by placeholders, and how many of each kind were replaced."""
    counts: Counter = Counter()

    def sub(kind: str, pattern: re.Pattern, keep=lambda m: True):
        def repl(m: re.Match) -> str:
            if not keep(m):
                return m.group(0)
            counts[kind] += 1
            return PLACEHOLDERS[kind]

        return lambda t: pattern.sub(repl, t)

    for step in (
        sub("email", _EMAIL),
        sub("credit_card", _CARD, lambda m: luhn_ok(re.sub(r"\D", "", m.group(0)))),
        sub("ip", _IPV6, lambda m: _public_ip(m.group(0))),
        sub("ip", _IPV4, lambda m: _public_ip(m.group(0))),
        sub("phone", _PHONE, lambda m: sum(c.isdigit() for c in m.group(0)) >= 10),
    ):
        text = step(text)
    return text, {k: counts.get(k, 0) for k in PLACEHOLDERS}
