"""The ``x-grounded`` options' old spellings, read until the next release: each maps to today's.

The line-boundary options became the keys of one ``lines`` object, ``largest`` and ``smallest`` one ``pick``, and
``prefer_labels`` the labels of weight 2. A schema (or learned-cues file) that writes an old spelling keeps working,
and the job logs one line per schema naming the new spelling, so its author can rewrite it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Mapping

from .options import KEYWORD, MARKS, PREFERS, GroundingError

log = logging.getLogger(__name__)

#: An old option -> its key in ``lines``.
LINES_KEYS = {
    "first_lines": "first",
    "starts_on": "starts_on",
    "ends_on": "ends_on",
    "shortest": "shortest",
    "cut_before": "cut_before",
    "to_block_end": "to_block_end",
    "within_line": "within_line",
}
#: The old options that ``pick`` chooses between, in the order the old grammar honoured them (``largest`` first).
PICKS = ("largest", "smallest")
OLD = (*LINES_KEYS, *PICKS, "prefer_labels")
_noted: set[str] = set()


def modern(options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``options`` (a declaration's object) in today's spelling; itself where it writes no old one."""
    if not any(name in options for name in OLD):
        return dict(options)
    out = {name: value for name, value in options.items() if name not in OLD}
    lines = {LINES_KEYS[name]: value for name, value in options.items() if name in LINES_KEYS}
    if lines:
        own = out.get("lines", {})
        if not isinstance(own, dict) or set(own) & set(lines):
            raise GroundingError(f"{where}: {KEYWORD} writes {sorted(set(lines))} both inside lines and out; write them in lines only")
        out["lines"] = {**own, **lines}
    wrong = next((name for name in PICKS if options.get(name) not in (True, False, None)), None)
    if wrong:
        raise GroundingError(f'{where}: {KEYWORD}.{wrong} must be true or false; write pick: "{wrong}" instead')
    picked = next((name for name in PICKS if options.get(name) is True), None)
    if picked and "pick" not in out:
        out["pick"] = picked
    if options.get("prefer_labels"):
        out["labels"] = _weighed(out.get("labels", []), options["prefer_labels"], where)
    order = dict.fromkeys("lines" if n in LINES_KEYS else "pick" if n in PICKS else "labels" if n == "prefer_labels" else n for n in options)
    return {name: out[name] for name in order if name in out}  # each new spelling where its first old one was


def _weighed(labels: Any, preferred: Any, where: str) -> Any:
    """``labels`` with ``prefer_labels`` added at weight 2; as they were where either is malformed (the table says why)."""
    if not isinstance(preferred, list) or not isinstance(labels, (list, dict)):
        return labels
    marking = dict.fromkeys(labels, MARKS) if isinstance(labels, list) else dict(labels)
    both = [label for label in preferred if label in marking]
    if both:
        raise GroundingError(f"{where}: {KEYWORD} names {both} in both labels and prefer_labels; give each label one weight in labels")
    return {**marking, **dict.fromkeys(preferred, PREFERS)}


def notes(declarations: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One note per old spelling that ``declarations`` (where -> options) write, naming the new one."""
    found = []
    for where, options in declarations.items():
        for name in (n for n in OLD if n in options):
            new = f"lines.{LINES_KEYS[name]}" if name in LINES_KEYS else f'pick: "{name}"' if name in PICKS else "labels of weight 2"
            found.append(f"{where}: {name} is {new}")
    return found


def warn_once(declarations: Mapping[str, Mapping[str, Any]], about: str) -> None:
    """Log one line for ``about`` (a schema, a file) naming each old spelling its declarations write, once a process."""
    found = notes(declarations)
    key = hashlib.sha256(json.dumps([about, found]).encode()).hexdigest()
    if found and key not in _noted:
        _noted.add(key)
        log.warning("%s: old %s spellings (they work until the next release): %s", about, KEYWORD, "; ".join(found))
