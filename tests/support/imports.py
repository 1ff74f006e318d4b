"""Every absolute import of a module, read from its source: ``import x``, ``from x import y`` and
``import_module("x")`` (an f-string's literal start too), anywhere in it, inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path


def absolute_imports(path: Path) -> set[tuple[str, int]]:
    """(top-level module, line) of every absolute import in the module at ``path``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))
        ):
            first = node.args[0].value if isinstance(node.args[0], ast.Constant) else node.args[0].values[0]
            names = (
                [getattr(first, "value", first)] if isinstance(getattr(first, "value", first), str) else []
            )
        found |= {(n.split(".")[0], node.lineno) for n in names}
    return found
