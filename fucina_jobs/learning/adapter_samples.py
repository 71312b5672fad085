"""A LoRA adapter's training samples: the job's prompt over each gold document cut to the passages that write its
values (``excerpts.excerpt``), and the whole gold record as the job's grammar would write it.

A run reads a document whole (or in chunks that fill the context) and writes one record for it, every value the
document gives. The samples teach that: each sample's answer is the row's whole gold label. Only its prompt is
shorter than the run's, since a forward and backward pass runs at 50-100 tokens a second on 2 CPU cores: the
document is cut to the passages around its values, as worked examples are, so the values stay in the text the
model reads, each beside its label.

Why not the chunker's windows, each answering with the values it writes: most windows of a contract do not write
its date, so two samples in three taught ``"effective_date": null``, and on whole documents the adapter wrote null
for every date (30% right on 10 unseen NDAs, against 90% with cues alone).

The job's own prompt building and JSON writing are given as functions (``SampleFormat``'s), so that the samples are
the very token ids the engine would feed and the answer the very text its grammar would write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..grounding.declaration import grounded_fields
from .excerpts import excerpt


@dataclass(frozen=True)
class Sample:
    """One gold row: its prompt's ids, the answer's ids (the stop token last), and each top-level field's value as a
    range of the answer's ids (what held-out field accuracy scores)."""

    row_id: str
    prompt: list[int]
    target: list[int]
    fields: dict[str, tuple[int, int]]


@dataclass(frozen=True, kw_only=True)
class SampleFormat:
    """The job's side of a sample: ``prompt`` a row with its text replaced by the given one, as the engine feeds it;
    ``answer`` a label as the job's grammar writes it; ``tokenizer`` encodes the answer, and ``stop`` is the id
    that ends it."""

    prompt: Callable[[dict[str, Any], str], list[int]]
    answer: Callable[[Any], str]
    tokenizer: Any
    stop: int


def samples(schema: dict[str, Any], rows: Sequence[tuple[str, dict[str, Any], Any]], text_field: str, job: SampleFormat) -> list[Sample]:
    """A sample of each gold row ((id, the row's fields, its label)) under ``schema`` (the job's, with its learned
    cues merged in: its grounded fields say which values the passages are cut around)."""
    fields = grounded_fields(schema)
    out = []
    for row_id, row, label in rows:
        text = excerpt(str(row.get(text_field, "")), label, fields)
        out.append(_sample(row_id, job, job.prompt(row, text), label))
    return out


def _sample(row_id: str, job: SampleFormat, prompt: list[int], label: dict[str, Any]) -> Sample:
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
