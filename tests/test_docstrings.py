"""The package's docstrings and comments say why in general terms: they name no development data set.

A docstring that cites the data a rule was tuned on ("the 625 dev receipts", a company copied from one of
them) goes stale as the data moves, and leaks a document's text into the code. The measurements live in
docs/history/; the code says what property of documents a rule relies on. ``bench/`` is exempt: its reports
name the data sets they read. Only docstrings and comments are read (``tokenize`` and ``ast``), so a string
that is code (a path a benchmark opens, say) is never flagged.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fucina_jobs"

#: What names a development data set, or text copied from one: its folder, its source, its size as a count of
#: its documents, and a legal form that only the receipts write.
DATA_SET = re.compile(
    r"receipts-dev|nda-train|maskbench-sample|shared/data|\bkleister\b|\bsroie\b|\bsdn\.?\s+bhd\b"
    r"|\b(?:625|254)\s+(?:dev\s+|train\s+)?(?:receipts|ndas|rows|documents|contracts)\b|\bdev\s+(?:receipts|set)\b",
    re.IGNORECASE,
)


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring (module, class, function) in ``source``."""
    found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and (doc := ast.get_docstring(node, clean=False)):
            found.append((node.body[0].lineno, doc))
    return found


def anecdotes(source: str) -> list[tuple[int, str]]:
    """(line, what) for each place the comments and docstrings of ``source`` name a data set."""
    return [(line, m.group(0)) for line, text in sorted(prose(source)) for m in DATA_SET.finditer(text)]


def test_the_scan_reads_prose_not_code():
    source = '''"""Module: tuned on the 625 dev receipts."""
PATH = "../shared/data/receipts-dev/inputs.jsonl"  # a path in code is code
def f():
    """Cuts ``ACME SDN BHD``."""
    return "nda-train"
# seen in nda-train
'''
    assert [what for _, what in anecdotes(source)] == ["625 dev receipts", "SDN BHD", "nda-train"]


def test_no_docstring_or_comment_names_a_data_set():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "bench" not in path.relative_to(PACKAGE).parts
        for line, what in anecdotes(path.read_text(encoding="utf-8"))
    ]
    assert not found, "docstrings and comments should say why in general terms, not cite a data set:\n" + "\n".join(found)
