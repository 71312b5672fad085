"""docs/ARCHITECTURE.md names only modules that exist: a map that points at moved or deleted files misleads.

The page names modules three ways: as paths (``fucina_jobs/native``, ``decoding/batch.py``,
``microbench/row_stats.py``), as dotted names (``fucina_jobs.engines``) and as bare file names inside a
list (``forward_step.py``, ``greedy.cpp``). Each must resolve to a file or folder of the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fucina_jobs"
DOC = REPO / "docs" / "ARCHITECTURE.md"
#: Folders outside the package that the page names files of.
OUTSIDE = ("checks", "microbench", "tests")

_QUOTED = re.compile(r"`([^`]+)`")
_FILE = re.compile(r"(?<![\w./])((?:\w+/)*\w+\.(?:py|cpp|h))\b")
_FOLDER = re.compile(r"(?<![\w./:])((?:\w+/)+)(?![\w.])")
_PACKAGE_PATH = re.compile(r"\bfucina_jobs/[\w/.]*\w")
_DOTTED = re.compile(r"\bfucina_jobs(?:\.\w+)+")


def named_paths(text: str) -> set[str]:
    """Every file or folder path the page writes in backquotes, and every ``fucina_jobs/...`` path anywhere."""
    found = set(_PACKAGE_PATH.findall(text))
    for span in _QUOTED.findall(text):
        found |= {p for p in _FILE.findall(span) + _FOLDER.findall(span) if "NAME" not in p}
    return found


def exists(path: str) -> bool:
    """A path from the repository root or the package's, or a bare file name found in either (a list's entry)."""
    if "/" not in path.rstrip("/") and not path.endswith("/"):
        return (PACKAGE / path).exists() or any(next(REPO.joinpath(top).rglob(path), None) for top in ("fucina_jobs", *OUTSIDE))
    return (REPO / path).exists() or (PACKAGE / path).exists()


def module_exists(dotted: str) -> bool:
    path = REPO.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_every_path_the_architecture_page_names_exists():
    missing = sorted(p for p in named_paths(DOC.read_text(encoding="utf-8")) if not exists(p))
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_dotted_module_the_architecture_page_names_exists():
    missing = sorted(m for m in set(_DOTTED.findall(DOC.read_text(encoding="utf-8"))) if not module_exists(m))
    assert not missing, f"docs/ARCHITECTURE.md names modules that do not exist: {missing}"


def test_the_check_catches_a_stale_name():
    assert "fucina_jobs/learning/nowhere.py" in named_paths("see `fucina_jobs/learning/nowhere.py`")
    assert not exists("fucina_jobs/learning/nowhere.py") and not exists("decoding/nowhere.py") and not exists("nowhere.cpp")
    assert exists("decoding/batch.py") and exists("microbench/row_stats.py") and exists("greedy.cpp") and exists("grounding/")
    assert not module_exists("fucina_jobs.nowhere") and module_exists("fucina_jobs.engines")
