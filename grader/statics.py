"""Static checks on candidate source, before anything runs (threats 10, 19, 22)."""
from __future__ import annotations

import ast
from dataclasses import dataclass

from grader.contract import Reason

_REFERENCE_NAMES = {"Model", "Reference", "ReferenceModel"}


@dataclass(frozen=True)
class Finding:
    """One static reason to floor a candidate."""

    code: Reason
    detail: str


def static_findings(source: str) -> list[Finding]:
    """Findings in source order; a source that does not parse is left to the worker (compile_error)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
                if name in _REFERENCE_NAMES:
                    found.append(Finding(Reason.INHERITANCE_BYPASS,
                                         f"line {node.lineno}: class {node.name} inherits the reference {name}"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for mod in mods:
                if mod.split(".")[0] in ("grader", "pipelines", "assets"):
                    found.append(Finding(Reason.SANDBOX_VIOLATION,
                                         f"line {node.lineno}: imports the grader's own package {mod!r}"))
    return found
