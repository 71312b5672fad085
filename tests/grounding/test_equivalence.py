"""Per-row grounded grammars keep plain and speculative decoding equal, token for token (float64 tiny model)."""

from dataclasses import replace

import pytest

from fucina_jobs.decoding.batch import Request
from fucina_jobs.decoding.constraint import Constraint
from fucina_jobs.decoding.drafting import document_spans
from fucina_jobs.grounding.declaration import grounded_fields
from fucina_jobs.grounding.grammar import grounded_lark
from fucina_jobs.grounding import learned_file
from fucina_jobs.learning import learned as learned_cues

from tests.helpers import GREEDY, SPEC, STOP, decode, Recorder
from .test_grammar import PARTY

DOCS = [
    "Invoice from Nordlicht Bakery GmbH to ACME Tools, total € 1.234,50, due 03/04/2025. Nordlicht Bakery GmbH thanks you.",
    'Seller: "Quote" & Sons\\Ltd; amount 99.90 USD; date 2025-02-11; seller "Quote" & Sons\\Ltd again.',
    "Ünïcødé Händler — Summe 12,00 €\nfällig am 1. März 2025\nÜnïcødé Händler",
]


def requests(tokenizer, grammars, copied=()):
    """One request per document. With ``copied`` (runs' generations by id), the document drafts copy from
    the document's spans and from pieces of what those runs wrote: the random model does not copy the
    document, so its spans alone would hardly ever be drafted. Pieces of this run's plain twin are drafted
    and accepted, pieces of a run at other settings are drafted where the grammar allows them, and rejected."""
    encode = lambda texts: tokenizer(texts, add_special_tokens=False).input_ids  # noqa: E731
    out = []
    for k, (doc, grammar) in enumerate(zip(DOCS, grammars)):
        written = [run[f"r{k}"].tokens for run in copied]
        document = document_spans(doc, encode) + [w[i : i + 5] for w in written for i in range(0, len(w), 4)] if copied else ()
        out.append(
            Request(
                f"r{k}",
                tokenizer.encode(doc + " JSON:", add_special_tokens=False),
                Recorder(grammar.clone()),
                seed=7 + k,
                max_tokens=48,
                document=document,
            )
        )
    return out


#: PARTY with its values narrowed by labels: runs of words after a label, labelled amounts and dates.
LABELLED = {
    **PARTY,
    "properties": {
        **PARTY["properties"],
        "name": {"type": "string", "maxLength": 40, "x-grounded": {"labels": ["from", "seller", "händler"]}},
        "amount": {"type": "number", "minimum": 0, "x-grounded": {"allow": [0], "labels": ["total", "amount", "summe"]}},
        "date": {"type": ["string", "null"], "format": "date", "x-grounded": {"labels": ["due", "date", "fällig am"]}},
    },
}


#: PARTY with the cues ``learn`` finds in a few gold rows laid out as the documents are.
TRAIN = [
    (f"Invoice from {name} to Kern AG, total € {amount},00, due {day:02d}/04/2025. Ref 7 of 2025-0{day % 9 + 1}-11.", label)
    for name, amount, day in [("Alder Mills", 12, 3), ("Birch & Co", 340, 14), ("Cedar Works GmbH", 77, 21), ("Dune Ltd", 5, 28)]
    for label in [{"name": name, "amount": amount, "date": f"2025-04-{day:02d}", "kind": "a"}]
]
LEARNED = learned_file.apply(PARTY, {c.name: {"path": list(c.path), "x-grounded": c.options} for c in learned_cues.learn(PARTY, TRAIN)}, "test")


def test_the_learned_schema_narrows_by_learned_labels():
    fields = {g.name: g for g in grounded_fields(LEARNED)}
    assert (fields["name"].labels, fields["date"].labels, fields["amount"].amount) == (("from",), ("due",), True)  # money alone: 12,00 not 7


#: Values known from gold (``known_values``), and a list of labelled runs.
KNOWN = {
    **PARTY,
    "properties": {
        **PARTY["properties"],
        "name": {
            "type": "string",
            "maxLength": 40,
            "x-grounded": {"known_values": ["ACME Tools", "Nordlicht Bakery GmbH", "Händler"], "most_words": 3},
        },
        "kind": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "x-grounded": {"labels": ["seller"], "most_words": 4}},
        },
    },
}


@pytest.mark.parametrize("schema", [PARTY, LABELLED, LEARNED, KNOWN], ids=["grounded", "labelled", "learned", "known"])
@pytest.mark.parametrize("params", [GREEDY, replace(GREEDY, temperature=0.8)], ids=["greedy", "sampled"])
def test_grounded_plain_equals_speculative(tokenizer, tiny_runner, params, schema):
    grammars = [Constraint.lark(grounded_lark(schema, doc), tokenizer, stop_token=STOP) for doc in DOCS]  # compiled once per row
    plain_requests = requests(tokenizer, grammars)
    plain = decode(tiny_runner, plain_requests, params=params)
    other = decode(tiny_runner, requests(tokenizer, grammars), params=replace(GREEDY, temperature=1.3))
    spec_requests = requests(tokenizer, grammars, copied=[plain, other])
    spec = decode(tiny_runner, spec_requests, params=params, spec=SPEC, streams=3)
    for p, s in zip(plain_requests, spec_requests):
        assert plain[p.id].tokens == spec[s.id].tokens, p.id
        assert plain[p.id].finish_reason == spec[s.id].finish_reason, p.id
        assert p.processor.commits == s.processor.commits, p.id
    assert sum(g.stats.accepted.get("forced", 0) for g in spec.values()) > 0, "grounded spans must be drafted from the grammar"
    drafted, accepted = (sum(getattr(g.stats, what).get("document", 0) for g in spec.values()) for what in ("drafted", "accepted"))
    assert drafted > accepted > 0, "document drafts must be made, some accepted and some rejected"
