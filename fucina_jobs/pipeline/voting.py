"""Voting: ``decoding.samples=k`` decodes k samples of a row and keeps each field's majority value.

Sample 1 is the row's own decode, with the job's sampling settings (greedy by
default) and its record seed, so ``k=1`` is today's job. Samples 2..k are
decoded at ``decoding.vote_temperature``, each with a seed derived from the
record seed and the sample's number: a row votes the same on any replica,
stream or batch. The k samples share the row's prompt, so they decode side by
side as streams of one replica's batch, and the prefix cache computes their
common prompt once.

Only samples that validate vote. Each top-level field keeps the value most
samples wrote (a field left out counts as a value too); a tie goes to the
earlier sample, so greedy wins a tie. The field's agreement is the share of
all k samples that wrote the kept value, a confidence beside the token
probabilities, which are averaged over those samples. Should the composed
record not validate (fields that depend on each other), the sample that
agrees with most of it is kept instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from typing import Any, Callable

from ..confidence import Confidence
from ..engines import Prompt, SamplingParams

_ABSENT = "\0absent"  # the vote of a sample that left a field out


def sample_prompts(prompt: Prompt, k: int, params: SamplingParams) -> list[Prompt]:
    """The row's ``k`` prompts: its own first, then ``k - 1`` sampled with ``params``, ids told apart by number."""
    samples = [prompt]
    for i in range(1, k):
        seed = int.from_bytes(hashlib.sha256(f"{prompt.seed}:sample{i}".encode()).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF
        samples.append(dataclasses.replace(prompt, id=f"{prompt.id}\0sample{i}", seed=seed, params=params))
    return samples


def vote(outputs: list[dict[str, Any]], records: list[dict[str, Any] | None], valid: Callable[[str], bool]) -> dict[str, Any]:
    """One output for a row from its samples' ``outputs`` (the replica's dicts) and their validated ``records``.

    The output's text is the voted record as compact JSON, its confidence the
    supporting samples' and its ``agreement`` each field's share; its token
    counts add up every sample's. Where no sample validated, it is the first
    sample's output, so the row is rejected for what went wrong there."""
    votes = [(i, r) for i, r in enumerate(records) if r is not None]
    totals = {"prompt_tokens": sum(o["prompt_tokens"] for o in outputs), "generated_tokens": sum(o["generated_tokens"] for o in outputs)}
    if not votes:
        return outputs[0] | totals | {"agreement": None}
    names = list(dict.fromkeys(name for _, r in votes for name in r))
    ballots = {name: [(i, _key(r.get(name, _ABSENT))) for i, r in votes] for name in names}
    share = lambda name, key: sum(k == key for _, k in ballots[name]) / len(outputs)  # noqa: E731
    kept: dict[str, Any] = {}
    supporters: dict[str, list[int]] = {}
    for name in names:
        winner = Counter(key for _, key in ballots[name]).most_common(1)[0][0]  # a tie: the earliest sample's (Counter keeps order)
        supporters[name] = [i for i, key in ballots[name] if key == winner]
        value = records[supporters[name][0]].get(name, _ABSENT)
        if value is not _ABSENT:
            kept[name] = value
    text = json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
    if valid(text):
        agreement = {name: share(name, _key(kept.get(name, _ABSENT))) for name in names}
        return outputs[votes[0][0]] | totals | {"text": text, "confidence": _confidence(outputs, supporters), "agreement": agreement}
    best, record = max(votes, key=lambda v: sum(_key(v[1].get(n, _ABSENT)) == _key(kept.get(n, _ABSENT)) for n in names))
    return outputs[best] | totals | {"agreement": {name: share(name, _key(record.get(name, _ABSENT))) for name in names}}


def _key(value: Any) -> str:
    """A value's ballot: 1608 and 1608.0 are the same amount."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if value is _ABSENT else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _confidence(outputs: list[dict[str, Any]], supporters: dict[str, list[int]]) -> Confidence:
    """Each value's token confidence: the mean over the samples that wrote it (their min for the min)."""
    result = Confidence()
    for name, samples in supporters.items():
        confidences = [outputs[i]["confidence"] for i in samples if outputs[i].get("confidence") is not None]
        paths = {p for c in confidences for p in c.field_mean if p == name or p.startswith((f"{name}.", f"{name}["))}
        for path in paths:
            means = [c.field_mean[path] for c in confidences if path in c.field_mean]
            result.field_mean[path] = sum(means) / len(means)
            result.field_min[path] = min(c.field_min[path] for c in confidences if path in c.field_min)
    result.record = min(result.field_mean.values(), default=None)
    return result
