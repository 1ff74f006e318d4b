"""A run id as one directory name: the default ``out`` of a build (``CORPUS_BUILD_ROOT/<name>``) and of a
version (``BUILD/versions/<name>``).

Why an escape and not a replacement: replacing every character outside ``[A-Za-z0-9._-]`` with ``_`` sent
``a:b``, ``a+b``, ``a~b`` and ``a_b`` to one directory (two runs writing one build), and left ``.`` and
``..`` as they were (``out`` the build root itself, or its parent). Here ``_`` is the escape character:
``__`` is ``_``, ``_XX`` one UTF-8 byte in hex, and a leading ``.`` is escaped too, so different ids give
different names, a name is never ``.``, ``..`` or hidden, and it keeps to the characters that need no
quoting anywhere (Airflow's ``manual__2026-01-01T00:00:00+00:00`` is
``manual____2026-01-01T00_3a00_3a00_2b00_3a00``).
"""

from __future__ import annotations

import string

#: characters a name keeps as they are (``_`` is the escape character, so it is doubled)
KEPT = frozenset(string.ascii_letters + string.digits + ".-")
#: the longest file name most filesystems take
MAX_NAME_BYTES = 255


def run_dir_name(run_id: str) -> str:
    """The directory name of ``run_id``, one to one (see the module docstring); a ValueError when the id
    is empty or its name would be longer than a file name can be (give the run an ``out``)."""
    if not run_id:
        raise ValueError("an empty run id names no directory: give the Param 'out'")
    parts = []
    for i, ch in enumerate(run_id):
        if ch == "_":
            parts.append("__")
        elif ch in KEPT and not (i == 0 and ch == "."):
            parts.append(ch)
        else:
            parts.extend(f"_{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
    name = "".join(parts)
    if len(name) > MAX_NAME_BYTES:
        raise ValueError(
            f"run id {run_id[:40]!r}… is too long for a directory name ({len(name)} bytes escaped, "
            f"at most {MAX_NAME_BYTES}): give the Param 'out'"
        )
    return name
