"""No constructor of the package takes more than four positional parameters, read from the source with ``ast``.

Past four, a call is a row of values whose meaning is their order, and two of the same type
swap unseen (``ShardWorker``'s seven strings and paths, ``Prompt``'s eight). The rest are
keyword-only: ``*`` in an ``__init__``, ``KW_ONLY`` or ``kw_only=True`` in a dataclass. A
``NamedTuple`` is a tuple, whose order is its meaning, and is not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fucina_jobs"
MAX_POSITIONAL = 4


def positional_parameters(cls: ast.ClassDef) -> int:
    """How many parameters ``cls``'s constructor takes by position: its ``__init__``'s, else its dataclass fields'."""
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is not None:
        return len(init.args.posonlyargs) + len(init.args.args) - 1  # less self
    dataclass = next((d for d in cls.decorator_list if "dataclass" in ast.unparse(d)), None)
    if dataclass is None or "kw_only=True" in ast.unparse(dataclass):
        return 0
    count = 0
    for node in cls.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        annotation, value = ast.unparse(node.annotation), ast.unparse(node.value) if node.value else ""
        if "KW_ONLY" in annotation:
            break
        if "ClassVar" not in annotation and "kw_only=True" not in value and "init=False" not in value:
            count += 1
    return count


def too_positional(path: Path, source: str) -> list[str]:
    """``path:Class (n)`` for each class of ``source`` whose constructor takes more than ``MAX_POSITIONAL`` by position."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and "NamedTuple" not in map(ast.unparse, node.bases):
            n = positional_parameters(node)
            if n > MAX_POSITIONAL:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.name} ({n})")
    return found


def test_no_constructor_takes_more_than_four_parameters_by_position():
    found = [f for path in sorted(PACKAGE.rglob("*.py")) for f in too_positional(path, path.read_text(encoding="utf-8"))]
    assert not found, "positional parameters past four:\n" + "\n".join(found)


def test_the_check_counts_what_a_call_may_pass_by_position():
    def count(source: str) -> int:
        return positional_parameters(ast.parse(source).body[0])

    assert count("class A:\n    def __init__(self, a, b, c, d, e): ...") == 5
    assert count("class A:\n    def __init__(self, a, b, *, c, d, e): ...") == 2
    assert count("@dataclass\nclass A:\n    a: int\n    b: int\n    c: int = 0\n    d: int = 0\n    e: int = 0") == 5
    assert count("@dataclass\nclass A:\n    a: int\n    _: KW_ONLY\n    b: int\n    c: int\n    d: int\n    e: int") == 1
    assert count("@dataclass(kw_only=True)\nclass A:\n    a: int\n    b: int\n    c: int\n    d: int\n    e: int") == 0
    assert count("@dataclass\nclass A:\n    a: int\n    b: int = field(kw_only=True)\n    c: ClassVar[int] = 0\n    d: list = field(init=False)") == 1
