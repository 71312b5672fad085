"""A LoRA adapter's training samples: the job's prompt over the windows of its gold documents, and the record the job's
grammar would write for each window.

A run decodes a long document window by window (the chunker's), and each window's record holds only what that window
writes: a grounded value the window does not write cannot be written there. So each window's target is its gold row's
label with every value the window does not write taken out (null, or out of its list), and the windows that train are
those that write gold values (the ones that write the most, ``VALUE_WINDOWS`` a row) and a few that write none
(``EMPTY_WINDOWS`` a row): they teach the model to write null rather than invent. A field the schema does not ground
keeps its gold value where the row is one window or the window writes the value's text.

The job's own prompt building, cutting and JSON writing are given as functions (``Window``'s), so that the samples are
the very token ids the engine would feed and the answer the very text its grammar would write.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..grounding.check import ungrounded_values
from ..grounding.declaration import Grounded, grounded_fields

#: Windows of a row that train on its gold values: the ones that write the most. Why 2: the parties and the date of a
#: contract sit in its first window, its governing law near its end; more windows of one row repeat the same values.
VALUE_WINDOWS = 2
#: Windows of a row that write none of its gold values and teach null. Why 1: one in three keeps null taught without
#: making it the answer the model learns to prefer.
EMPTY_WINDOWS = 1


@dataclass(frozen=True)
class Sample:
    """One window of one gold row: its prompt's ids, the answer's ids (the stop token last), and each top-level field's
    value as a range of the answer's ids (what held-out field accuracy scores)."""

    row_id: str
    prompt: list[int]
    target: list[int]
    fields: dict[str, tuple[int, int]]


@dataclass(frozen=True, kw_only=True)
class Window:
    """The job's side of a sample: ``cut`` a row's text into its windows' texts, ``prompt`` one window's ids as the
    engine feeds them, ``answer`` a label as the job's grammar writes it; ``tokenizer`` encodes the answer, and
    ``stop`` is the id that ends it."""

    cut: Callable[[dict[str, Any]], list[str]]
    prompt: Callable[[dict[str, Any], str], list[int]]
    answer: Callable[[Any], str]
    tokenizer: Any
    stop: int


def samples(schema: dict[str, Any], rows: Sequence[tuple[str, dict[str, Any], Any]], text_field: str, job: Window, seed: int) -> list[Sample]:
    """The samples of the gold ``rows`` ((id, the row's fields, its label)) under ``schema`` (the job's, with its
    learned cues merged in: what the run's grammar grounds)."""
    fields, chooser, out = grounded_fields(schema), random.Random(seed), []
    for row_id, row, label in rows:
        windows = job.cut(row)
        labels = [window_label(schema, fields, label, text, whole=len(windows) == 1) for text in windows]
        held = [_count(label_) for label_ in labels]
        order = sorted((i for i in range(len(windows)) if held[i]), key=lambda i: (-held[i], i))[:VALUE_WINDOWS]
        empty = [i for i in range(len(windows)) if not held[i]]
        chosen = sorted(order + chooser.sample(empty, min(EMPTY_WINDOWS, len(empty))))
        out += [_sample(row_id, job, job.prompt(row, windows[i]), labels[i]) for i in chosen]
    return out


def window_label(schema: dict[str, Any], fields: list[Grounded], label: dict[str, Any], text: str, *, whole: bool) -> dict[str, Any]:
    """``label`` as the window ``text`` can write it: each top-level value it does not write null (where the schema
    allows null) and each list item it does not write left out; ``whole``: the window is the row's whole text."""
    properties = schema.get("properties") or {}
    out = {}
    for key, value in label.items():
        node = properties.get(key) if isinstance(properties.get(key), dict) else {}
        if isinstance(value, list):
            out[key] = [item for item in value if _written({key: [item]}, key, item, fields, text, whole)]
        elif value is None or _written({key: value}, key, value, fields, text, whole) or not _nullable(node):
            out[key] = value
        else:
            out[key] = None
    return out


def _written(record: dict[str, Any], key: str, value: Any, fields: list[Grounded], text: str, whole: bool) -> bool:
    """Does the window ``text`` write ``value`` (``record``: it at its field ``key``)? Its grounded values must be found
    there; a value with none grounded is written where the window is the whole text or holds its text."""
    checked, misses = ungrounded_values(record, [g for g in fields if g.path[0] == key], text)
    if checked:
        return not misses
    return whole or str(value).casefold() in text.casefold()


def _nullable(node: dict[str, Any]) -> bool:
    kinds = node.get("type")
    return kinds == "null" or (isinstance(kinds, list) and "null" in kinds) or any(_nullable(n) for n in node.get("anyOf", []))


def _count(label: dict[str, Any]) -> int:
    """How many values ``label`` gives (a list's items each)."""
    return sum(len(v) if isinstance(v, list) else v is not None for v in label.values())


def _sample(row_id: str, job: Window, prompt: list[int], label: dict[str, Any]) -> Sample:
    answer = job.answer(label)
    encoded = job.tokenizer(answer, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True)
    offsets = encoded["offset_mapping"]
    fields = {}
    for key, (start, end) in value_spans(answer).items():
        ids = [i for i, (s, e) in enumerate(offsets) if e > start and s < end]
        fields[key] = (ids[0], ids[-1] + 1)
    return Sample(row_id, prompt, list(encoded["input_ids"]) + [job.stop], fields)


def value_spans(answer: str) -> dict[str, tuple[int, int]]:
    """Each top-level key of the JSON object ``answer`` and its value's character range, read by JSON's own decoder,
    whatever the spacing the grammar wrote."""
    decoder, spans = json.JSONDecoder(), {}
    position = answer.index("{") + 1
    while True:
        while answer[position] in " \t\n\r,":
            position += 1
        if answer[position] == "}":
            return spans
        key, position = decoder.raw_decode(answer, position)
        position = answer.index(":", position) + 1
        while answer[position] in " \t\n\r":
            position += 1
        _, end = decoder.raw_decode(answer, position)
        spans[key] = (position, end)
        position = end
