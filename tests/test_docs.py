"""The docs stay references a newcomer can read: short pages that say what is true now, a short README.

Dated measurements and the story of how a figure came about belong in docs/history/, which these limits leave out.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers import REPO

#: Why 250: a page read in one sitting; the longest reference pages, cut to what holds now, fit in it.
MOST_LINES = 250
#: Why 12 KB: an on-ramp (what it is, the commands, a map, links); good READMEs of the field are 10-14 KB.
README_MOST_BYTES = 12 * 1024
REFERENCE_DOCS = sorted((REPO / "docs").glob("*.md"))
#: A heading named after a ticket ("## Failing storage (issue 45)") is a lab note, not a reference.
TICKET_HEADING = re.compile(r"^#+ .*\b(issue|point) \d+", re.I | re.M)


@pytest.mark.parametrize("doc", REFERENCE_DOCS, ids=lambda p: p.name)
def test_each_reference_doc_is_at_most_250_lines_with_no_ticket_headings(doc):
    text = doc.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    assert lines <= MOST_LINES, f"docs/{doc.name} is {lines} lines (at most {MOST_LINES}): move dated figures and narratives to docs/history/"
    assert not TICKET_HEADING.findall(text), f"docs/{doc.name}: a heading names an issue or a point: {TICKET_HEADING.search(text).group(0)!r}"


def test_the_readme_is_at_most_12_kb():
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_MOST_BYTES, f"README.md is {size} bytes (at most {README_MOST_BYTES}): move reference material to docs/"


def test_the_limits_see_the_reference_docs_and_not_the_history():
    """The glob must find the pages it limits, and only them: an empty parametrization would pass in silence."""
    names = {p.name for p in REFERENCE_DOCS}
    assert {"ARCHITECTURE.md", "CONFIG.md", "RELIABILITY.md"} <= names
    assert all(p.parent.name == "docs" for p in REFERENCE_DOCS)
