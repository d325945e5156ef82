"""A static evaluator for a KernelBench module's constants: numbers, tuples, lists, strings and bounded
arithmetic fold; anything else is Unfoldable. Nothing of the module is run."""
from __future__ import annotations

import ast
import operator
from typing import Any, Callable


class Unfoldable(Exception):
    """An expression the static evaluator does not fold."""


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,  # `COLS = 1 << 18`
}


_SEQ = (tuple, list, str)


def _small(v: Any) -> Any:
    """Refuse values that could only come from hostile arithmetic (huge ints, long sequences)."""
    if isinstance(v, int) and abs(v) > 1 << 62 or isinstance(v, _SEQ) and len(v) > 4096:
        raise Unfoldable("value out of range")
    return v


def fold(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool, str, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        out: list[Any] = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                inner = fold(e.value, env)
                if not isinstance(inner, (tuple, list)):
                    raise Unfoldable("starred non-sequence")
                out.extend(inner)
            else:
                out.append(fold(e, env))
        return _small(tuple(out) if isinstance(node, ast.Tuple) else out)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = fold(node.operand, env)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = fold(node.left, env), fold(node.right, env)
        if isinstance(a, _SEQ) or isinstance(b, _SEQ):
            repeat = b if isinstance(a, _SEQ) else a
            if not (isinstance(node.op, ast.Add) and type(a) is type(b) or isinstance(node.op, ast.Mult)
                    and type(repeat) is int and 0 <= repeat <= 64):
                raise Unfoldable("sequence arithmetic")
        elif not all(type(x) in (int, float) for x in (a, b)):
            raise Unfoldable("arithmetic on non-numbers")
        elif isinstance(node.op, ast.Pow) and not (type(b) is int and 0 <= b <= 64 and abs(a) <= 1 << 16):
            raise Unfoldable("power out of range")
        elif isinstance(node.op, (ast.LShift, ast.RShift)) and not (type(a) is int and type(b) is int and 0 <= b <= 62):
            raise Unfoldable("shift out of range")
        try:
            return _small(_BINOPS[type(node.op)](a, b))
        except (TypeError, ZeroDivisionError, OverflowError, ValueError):
            raise Unfoldable("arithmetic") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "float") \
            and len(node.args) == 1 and not node.keywords:
        v = fold(node.args[0], env)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            try:
                return _small(int(v) if node.func.id == "int" else float(v))
            except (OverflowError, ValueError):
                raise Unfoldable("conversion") from None
    raise Unfoldable(type(node).__name__)


def module_env(tree: ast.Module) -> dict[str, Any]:
    """The module-level names whose values fold, in the order the module binds them."""
    env: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            _bind(stmt.targets, stmt.value, env)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            _bind([stmt.target], stmt.value, env)
    return env


def _bind(targets: list[ast.expr], value: ast.expr, env: dict[str, Any]) -> None:
    try:
        v = fold(value, env)
    except Unfoldable:
        v = Unfoldable
    for t in targets:
        if isinstance(t, ast.Name):
            if v is Unfoldable:
                env.pop(t.id, None)
            else:
                env[t.id] = v
        elif isinstance(t, (ast.Tuple, ast.List)):
            names = [e.id for e in t.elts if isinstance(e, ast.Name)]
            ok = v is not Unfoldable and isinstance(v, (tuple, list)) and len(v) == len(t.elts) == len(names)
            for i, n in enumerate(names):
                if ok:
                    env[n] = v[i]
                else:
                    env.pop(n, None)
