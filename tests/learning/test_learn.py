"""Cues learned from gold rows of a kind no shipped job knows: shipping notices, made up here with distractors."""

import json
import random
from pathlib import Path

import pytest

from fucina_jobs.decoding.constraint import Constraint
from fucina_jobs.grounding.check import ungrounded_values
from fucina_jobs.grounding.declaration import grounded_fields
from fucina_jobs.grounding.candidates import candidates
from fucina_jobs.grounding.grammar import grounded_lark
from fucina_jobs.grounding import learned_file
from fucina_jobs.learning import learned as learned_cues
from fucina_jobs.learn_command import learn_command
from fucina_jobs.learning.evidence import keyed, label_contexts, word_runs
from fucina_jobs.learning.excerpts import excerpt
from fucina_jobs.pipeline.examples import load_examples
from fucina_jobs.config import ConfigError, ConstraintConfig, validate
from fucina_jobs.pipeline.job_constraint import read_constraint
from tests.helpers import STOP, instance_accepted, job_dict

SCHEMA = {
    "type": "object",
    "properties": {
        "carrier": {"type": "string", "maxLength": 40, "x-grounded": True},
        "shipped_on": {"type": ["string", "null"], "format": "date", "x-grounded": True},
        "weight": {"type": "number", "x-grounded": True},
        "transit": {"type": ["string", "null"]},
    },
    "required": ["carrier", "shipped_on", "weight", "transit"],
    "additionalProperties": False,
}
CARRIERS = ["Nordwind Freight", "Bluefin Logistics", "Kestrel Cargo Lines", "Oakridge Haulage", "Pelican Express"]
WORDS = ["one", "two", "three", "four", "five", "six", "seven"]


def notice(n: int) -> tuple[str, dict]:
    """A shipping notice: the shipping date beside an order date and a delivery date, the weight beside a count
    and a price, the transit time in words with its digits, the carrier after its label and in a closing line."""
    rng = random.Random(n)
    carrier = CARRIERS[n % len(CARRIERS)]
    shipped, ordered, due = (f"{rng.randint(1, 28)}th day of {m}, 20{rng.randint(10, 24)}" for m in ("March", "January", "May"))
    weight, pieces, price = round(rng.uniform(10, 900), 1), rng.randint(2, 9), round(rng.uniform(100, 5000), 2)
    days = rng.randint(1, 7)
    text = (
        f"SHIPPING NOTICE no. {1000 + n}\nOrdered on the {ordered}.\nCarrier: {carrier.upper()}\n"
        f"Pieces: {pieces}   Declared value: {price}\nShipped on the {shipped} from dock {rng.randint(1, 40)}.\n"
        f"Gross weight: {weight} kg\nExpected transit: {WORDS[days - 1]} ({days}) day{'s' * (days > 1)}; delivery by the {due}.\n"
        f"Thank you for choosing {carrier.upper()}."
    )
    iso = lambda s: __import__("datetime").datetime.strptime(s.replace("th day of", ""), "%d %B, %Y").date().isoformat()  # noqa: E731
    label = {"carrier": carrier, "shipped_on": iso(shipped), "weight": weight, "transit": f"{days} days" if days > 1 else "1 day"}
    return text, label


GOLD = [notice(n) for n in range(12)]


def by_name(cues):
    return {c.name: c for c in cues}


def test_learn_finds_each_fields_label_units_and_case_from_gold_alone():
    cues = by_name(learned_cues.learn(SCHEMA, GOLD))
    assert cues["shipped_on"].options["labels"] == ["shipped on the"]  # the words before the date, not the order's
    assert any("weight" in label for label in cues["weight"].options["labels"])
    assert cues["transit"].options["units"] == ["day"]  # an ungrounded field whose gold is a count of units
    assert cues["carrier"].options["case"] == "title"  # the gold is re-cased: CARRIER: NORDWIND FREIGHT is Nordwind Freight
    assert cues["carrier"].evidence["recased"]["title"] == len(GOLD) > cues["carrier"].evidence["recased"]["exact"]
    for name in ("carrier", "shipped_on", "weight"):
        assert cues[name].evidence["pick_rate_after"] > cues[name].evidence["pick_rate_before"], name
    assert cues["transit"].evidence["written"] == len(GOLD)  # three (3) days writes 3 days


def test_learned_labels_narrow_the_grammar_to_the_gold_value():
    merged = learned_file.apply(SCHEMA, _entries(learned_cues.learn(SCHEMA, GOLD)), "test")
    fields = {g.name: g for g in grounded_fields(merged)}
    text, label = notice(99)  # a notice no cue was learned from
    assert candidates(fields["shipped_on"], text) == [json.dumps(label["shipped_on"])]
    assert candidates(fields["weight"], text) == [json.dumps(label["weight"])]
    assert json.dumps(label["transit"]) in candidates(fields["transit"], text)
    plain = {g.name: g for g in grounded_fields(SCHEMA)}
    assert len(candidates(plain["shipped_on"], text)) == 3  # without the cues, every date the notice writes


def test_hand_written_options_win_over_learned_ones():
    own = json.loads(json.dumps(SCHEMA))
    own["properties"]["shipped_on"]["x-grounded"] = {"labels": ["ordered on"]}
    entries = _entries(learned_cues.learn(SCHEMA, GOLD))
    entries["shipped_on"]["x-grounded"]["day_first"] = True
    merged = learned_file.apply(own, entries, "test")
    assert merged["properties"]["shipped_on"]["x-grounded"] == {**entries["shipped_on"]["x-grounded"], "labels": ["ordered on"]}


def test_a_learned_field_the_schema_lost_is_an_error_naming_it():
    entries = _entries(learned_cues.learn(SCHEMA, GOLD))
    smaller = json.loads(json.dumps(SCHEMA))
    del smaller["properties"]["weight"]
    with pytest.raises(learned_file.LearnedError, match="field weight is not in the schema"):
        learned_file.apply(smaller, entries, "constraint.learned: x.json")


def test_no_gold_learns_nothing_and_the_schema_is_unchanged():
    assert learned_cues.learn(SCHEMA, []) == []
    assert learned_file.apply(SCHEMA, {}, "test") == SCHEMA


def test_learn_command_writes_the_file_that_run_reads(tmp_path, monkeypatch, capsys):
    job = _job_folder(tmp_path)
    monkeypatch.chdir(job)
    assert learn_command(["conf=notices", "gold=data/gold.jsonl"]) == 0
    written = json.loads((job / "jobs/notices/learned.json").read_text())
    assert written["fields"]["shipped_on"]["x-grounded"]["labels"] == ["shipped on the"]
    assert written["fields"]["shipped_on"]["evidence"]["labels"]["shipped on the"]["marks_gold_in_rows"] == len(GOLD)
    out = capsys.readouterr().out
    assert "constraint.learned=jobs/notices/learned.json" in out and "| shipped_on |" in out
    constraint = read_constraint(ConstraintConfig(json_schema="schemas/notice.json", learned="jobs/notices/learned.json"), job)
    assert constraint.schema["properties"]["transit"]["x-grounded"]["units"] == ["day"]
    plain = read_constraint(ConstraintConfig(json_schema="schemas/notice.json"), job)
    assert plain.digest != constraint.digest  # a run with cues is another version of the job
    text, label = notice(7)
    assert label["shipped_on"] in grounded_lark(constraint.schema, text)
    examples = [json.loads(line) for line in (job / "jobs/notices/learned-examples.jsonl").read_text().splitlines()]
    assert [e["label"] for e in examples] == [label for _, label in GOLD] and "prompt.examples_nearest=true" in out
    cfg = validate(
        job_dict(
            tmp_path / "out",
            constraint={"json_schema": "schemas/notice.json", "learned": "jobs/notices/learned.json"},
            dataset={"path": "data/inputs.jsonl"},
        )
        | {"prompt": {"examples": "jobs/notices/learned-examples.jsonl", "examples_nearest": True}}
    )
    assert len(load_examples(cfg, job, "{text}", constraint.schema)) == len(GOLD)  # every one a valid example of the job it was learned for


def test_a_long_document_is_cut_to_the_passages_that_write_its_values():
    text, label = notice(3)
    long = "Preamble words. " * 200 + text.replace("\n", " filler words here. " * 40 + "\n")
    fields = grounded_fields(learned_file.apply(SCHEMA, _entries(learned_cues.learn(SCHEMA, GOLD)), "test"))
    cut = excerpt(long, label, fields)
    assert len(cut) < len(long) / 2 and "[...]" in cut and "Preamble" not in cut
    assert not ungrounded_values(label, fields, cut)[1]  # every value is written in the passages kept
    assert excerpt(text, label, fields) == text  # a short document is its own example


def test_learn_command_errors_are_one_line(tmp_path, monkeypatch, capsys):
    job = _job_folder(tmp_path)
    monkeypatch.chdir(job)
    (job / "data/other.jsonl").write_text(json.dumps({"id": "nope", "label": {}}) + "\n")
    assert learn_command(["conf=notices", "gold=data/other.jsonl"]) == 2
    assert "none of the 1 gold ids of data/other.jsonl is a row" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="constraint.learned: .*missing.json does not exist"):
        read_constraint(ConstraintConfig(json_schema="schemas/notice.json", learned="missing.json"), job)


def test_cues_learned_from_single_documents_apply_to_the_items_of_a_list_of_them(tmp_path, monkeypatch, capsys):
    """A report lists notices: the cues learned from single notices apply at ``learned_at``, to the fields its items have."""
    job = _job_folder(tmp_path)
    monkeypatch.chdir(job)
    assert learn_command(["conf=notices", "gold=data/gold.jsonl"]) == 0
    item = {k: v for k, v in SCHEMA["properties"].items() if k != "transit"}
    listing = {"type": "object", "properties": {"notices": {"type": "array", "items": {"type": "object", "properties": item}}}}
    (job / "schemas/listing.json").write_text(json.dumps(listing))
    c = ConstraintConfig(json_schema="schemas/listing.json", learned="jobs/notices/learned.json", learned_at="notices/[]")
    items = read_constraint(c, job).schema["properties"]["notices"]["items"]["properties"]
    assert items["shipped_on"]["x-grounded"]["labels"] == ["shipped on the"] and "transit" not in items
    with pytest.raises(ConfigError, match="field carrier is not in the schema"):
        read_constraint(ConstraintConfig(json_schema="schemas/listing.json", learned="jobs/notices/learned.json"), job)
    capsys.readouterr()
    overrides = ["constraint.json_schema=schemas/listing.json", "constraint.learned=jobs/notices/learned.json", "constraint.learned_at=notices/[]"]
    assert learn_command(["conf=notices", "gold=data/gold.jsonl", *overrides]) == 2  # it would write single notices' cues as the list's
    assert "constraint.learned_at=notices/[]" in capsys.readouterr().err


def test_an_array_the_gold_never_leaves_empty_is_held_to_the_golds_item_counts(tokenizer):
    schema = {
        "type": "object",
        "properties": {"party": {"type": "array", "items": {"type": "string", "maxLength": 40, "x-grounded": True}}},
        "required": ["party"],
        "additionalProperties": False,
    }
    gold = [(f"Agreement between {a} and {b}.", {"party": [a, b][: 1 + n % 2]}) for n, (a, b) in enumerate(zip(CARRIERS, CARRIERS[1:]))]
    cues = by_name(learned_cues.learn(schema, gold))
    assert cues["party[]"].array == {"minItems": 1, "maxItems": 2}
    entries = {c.name: {"path": list(c.path), "x-grounded": c.options, "array": c.array} for c in cues.values()}
    merged = learned_file.apply(schema, entries, "test")
    assert (merged["properties"]["party"]["minItems"], merged["properties"]["party"]["maxItems"]) == (1, 2)
    text = "Agreement between Kestrel Cargo Lines and Pelican Express."
    constraint = lambda s: Constraint.lark(grounded_lark(s, text), tokenizer, stop_token=STOP)  # noqa: E731
    assert instance_accepted(constraint(schema), tokenizer, {"party": []}, separators=(",", ":"))
    assert not instance_accepted(constraint(merged), tokenizer, {"party": []}, separators=(",", ":"))
    assert instance_accepted(constraint(merged), tokenizer, {"party": ["Kestrel Cargo Lines"]}, separators=(",", ":"))
    own = {**schema, "properties": {"party": {**schema["properties"]["party"], "minItems": 0}}}
    assert learned_file.apply(own, entries, "test")["properties"]["party"]["minItems"] == 0  # the schema's own wins


def test_a_gold_normal_form_is_learned_marks_left_out_and_recased(tokenizer):
    schema = {"type": "object", "properties": {"seller": {"type": "string", "maxLength": 40, "x-grounded": True}}}
    names = ["Nordwind Freight", "Bluefin Logistics", "Kestrel Cargo", "Oakridge Haulage"]
    gold = [(f"Sold by {name.upper()}, INC., of Ohio, on 3 May.", {"seller": f"{name} Inc."}) for name in names]
    cues = by_name(learned_cues.learn(schema, gold))["seller"]
    assert (cues.options["drop_marks"], cues.options["case"]) == (",", "title")  # the commas a gold value never holds
    assert cues.evidence["recased"]["title"] == len(names)
    merged = learned_file.apply(schema, {"seller": {"path": ["seller"], "x-grounded": cues.options}}, "test")
    text = "Sold by PELICAN EXPRESS, INC., of Utah."
    constraint = lambda: Constraint.lark(grounded_lark(merged, text), tokenizer, stop_token=STOP)  # noqa: E731
    assert instance_accepted(constraint(), tokenizer, {"seller": "Pelican Express Inc."}, separators=(",", ":"))
    assert not instance_accepted(constraint(), tokenizer, {"seller": "PELICAN EXPRESS, INC."}, separators=(",", ":"))
    assert ungrounded_values({"seller": "Pelican Express Inc."}, grounded_fields(merged), text) == (1, [])


def test_label_contexts_and_word_runs():
    text = "This agreement is governed by the laws of the State of Oregon.\nParties:\nNIKE, Inc."
    start = text.index("Oregon")
    assert label_contexts(text, start, 5) == ["of", "state of", "the state of", "of the state of", "laws of the state of"]
    assert label_contexts(text, text.index("NIKE"), 3) == ["parties"]  # the label on the line above
    assert word_runs("Nike Inc.", text) == [(text.index("NIKE"), len(text) - 1)]
    deed = "By and between Palm, Inc. (“Palm”), and Jane Roe, of Utah."
    assert label_contexts(deed, deed.index("Jane"), 3) == ["and", "), and"]  # the close of the first party's defined name
    bill = "Sales tax (8.5%)      $44.84\nBTW 21%   € 181,65"
    assert label_contexts(bill, bill.index("44"), 3) == ["tax", "sales tax"]  # the rate between label and amount passed over
    assert label_contexts(bill, bill.index("181"), 3) == ["btw"]
    assert keyed("Kunde: Nadia Brunner", 7) and keyed("Bill To:\nHalden LLC", 9) and not keyed("Made by Palm Inc.", 8)


COUNTERPARTY = {
    "type": "object",
    "properties": {"counterparty": {"type": "string", "maxLength": 60, "x-grounded": True}},
    "required": ["counterparty"],
}
FIRMS = ["Palm Inc.", "Nike Inc.", "Acme LLC", "Zeta Corp.", "Orbit Ltd.", "Quill Co."]


def deed(n: int, name: str) -> tuple[str, dict]:
    """A deed: the second party after the first one's defined name, and ``and`` written before other words too."""
    firm, alias = FIRMS[n % len(FIRMS)], ["Seller", "Company", "Owner"][n % 3]
    return f"Made by {firm} (“{alias}”), and {name}, in Salt Lake and Provo and Ogden, on day {n}.", {"counterparty": name}


def test_the_close_of_a_defined_name_is_learned_as_the_label_of_the_value_after_it(tokenizer):
    gold = [deed(n, name) for n, name in enumerate(TENANTS)]
    cues = by_name(learned_cues.learn(COUNTERPARTY, gold))["counterparty"]
    assert cues.options["labels"] == ["), and"], cues.options
    merged = learned_file.apply(COUNTERPARTY, _entries([cues]), "test")
    text, _ = deed(9, "Gus Lee")
    for name, ok in (("Gus Lee", True), ("Provo", False), ("Ogden", False)):
        constraint = Constraint.lark(grounded_lark(merged, text), tokenizer, stop_token=STOP)
        assert instance_accepted(constraint, tokenizer, {"counterparty": name}, separators=(",", ":")) is ok, name


def _entries(cues):
    return {c.name: {"path": list(c.path), "x-grounded": c.options} for c in cues}


def _job_folder(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    (job / "conf").mkdir(parents=True)
    (job / "schemas").mkdir()
    (job / "data").mkdir()
    (job / "schemas/notice.json").write_text(json.dumps(SCHEMA))
    rows = [{"id": f"n{k}", "text": text} for k, (text, _) in enumerate(GOLD)]
    (job / "data/inputs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (job / "data/gold.jsonl").write_text("".join(json.dumps({"id": f"n{k}", "label": label}) + "\n" for k, (_, label) in enumerate(GOLD)))
    (job / "conf/notices.yaml").write_text(
        "defaults: [base, _self_]\nname: notices\nconstraint: {json_schema: schemas/notice.json}\ndataset: {path: data/inputs.jsonl}\n"
    )
    return job


@pytest.mark.slow
def test_learning_curve_scores_held_out_rows_with_cues_learned_from_the_others(tmp_path, monkeypatch, capsys):
    job = _job_folder(tmp_path)
    monkeypatch.chdir(job)
    argv = ["conf=notices", "gold=data/gold.jsonl", "curve=0,8", "held_out=4", "out=curve", "runtime.streams=2"]
    assert learn_command(argv) == 0
    table = capsys.readouterr().out
    assert "scored on 4 held-out gold rows" in table and "| gold rows learned from | carrier | shipped_on | transit | weight |" in table
    held_out = [json.loads(line)["id"] for line in (job / "curve/held_out_gold.jsonl").read_text().splitlines()]
    assert held_out == ["n8", "n9", "n10", "n11"]  # the last rows, never learned from
    assert json.loads((job / "curve/learned-8.json").read_text())["rows"] == 8
    point = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table.splitlines() if line.startswith("| 8 ")}
    assert point["8"][2] == "1.00" and point["8"][4] == "1.00"  # the learned labels leave the held-out rows one date and one weight


PORTS = ["Le Havre", "La Spezia", "Gdansk"]
ORIGINS = ["Oslo", "Bern", "Riga", "Cork"]
VERBS = ["is bound for", "heads on to", "lands in", "will reach", "ends its trip in", "is consigned at"]
CLERKS = ["Ada Brandt", "Ivo Kessler", "Lena Marsh", "Omar Quist", "Tess Varga", "Uma Wolff", "Rex Yates", "Nia Zorn", "Eli Abbot"]
MOVES = {
    "type": "object",
    "properties": {
        "port": {"type": ["string", "null"], "x-grounded": True},
        "clerk": {"type": ["string", "null"], "x-grounded": True},
    },
    "required": ["port", "clerk"],
}


def move(n: int) -> tuple[str, dict]:
    """A crate's move: its port, one of a few, named in prose that words it differently each time, beside an origin
    city and a clerk whose name no other row writes."""
    port, origin, clerk = PORTS[n % 3], ORIGINS[n % 4], CLERKS[n % len(CLERKS)]
    text = f"Crate {n} left {origin} on Monday. Signed {clerk}. The crate {VERBS[n % len(VERBS)]} {port} by Friday."
    return text, {"port": port, "clerk": clerk}


def test_values_that_repeat_across_rows_are_learned_as_known_values_and_narrow_the_grammar(tokenizer):
    gold = [move(n) for n in range(9)]
    cues = by_name(learned_cues.learn(MOVES, gold))
    assert set(cues["port"].options["known_values"]) == set(PORTS)  # a closed class, given again and again
    assert cues["port"].evidence["known_values"]["pick_rate_left_out"] > cues["port"].evidence["pick_rate_before"]
    assert "known_values" not in cues.get("clerk", learned_cues.FieldCues("clerk", ("clerk",), {})).options  # each name once
    merged = learned_file.apply(MOVES, _entries(learned_cues.learn(MOVES, gold)), "test")
    text = "Crate 77 left Cork on Monday. Signed Max Holm. The crate drifts towards La Spezia by Friday."  # a new row
    for port, ok in (("La Spezia", True), ("Spezia", False), ("Cork", False), ("Monday", False)):
        constraint = Constraint.lark(grounded_lark(merged, text), tokenizer, stop_token=STOP)
        assert instance_accepted(constraint, tokenizer, {"port": port, "clerk": None}, separators=(",", ":")) is ok, port


SUPPLIERS = ["Alder Mills LLC", "Birch Tools Inc.", "Cedar & Sons LLC", "Dune Works Inc.", "Elm Freight LLC", "Fir Labs Inc."]
SUPPLY = {"type": "object", "properties": {"supplier": {"type": "string", "maxLength": 60, "x-grounded": True}}, "required": ["supplier"]}


def supply(n: int, name: str) -> tuple[str, dict]:
    """A supply note: the supplier after its label, then words about it that a run of words would run on into."""
    return f"Note {n}. Supplied by {name} a company of {['Ohio', 'Utah', 'Iowa'][n % 3]} since {1990 + n}.", {"supplier": name}


def test_the_last_words_of_gold_names_are_learned_as_where_a_run_ends(tokenizer):
    cues = by_name(learned_cues.learn(SUPPLY, [supply(n, name) for n, name in enumerate(SUPPLIERS)]))
    options, evidence = cues["supplier"].options, cues["supplier"].evidence
    assert options["labels"] == ["by"] and options["lines"]["ends_on"] == "(?i:inc\\.|llc)", options  # the shortest label that marks them all
    assert evidence["endings"] == {"llc": 3, "inc.": 3}
    merged = learned_file.apply(SUPPLY, _entries(learned_cues.learn(SUPPLY, [supply(n, name) for n, name in enumerate(SUPPLIERS)])), "test")
    text, _ = supply(9, "Gorse Textiles LLC")  # a supplier no row gave
    for name, ok in (("Gorse Textiles LLC", True), ("Gorse Textiles", False), ("Gorse Textiles LLC a", False)):
        constraint = Constraint.lark(grounded_lark(merged, text), tokenizer, stop_token=STOP)
        assert instance_accepted(constraint, tokenizer, {"supplier": name}, separators=(",", ":")) is ok, name


SIGNERS = ["Orla Quinn", "Pax Reyes Soto", "Quill Tanaka", "Rue Ueda Vance", "Sol Walsh", "Tam Xu Young"]
SIGNED = {"type": "object", "properties": {"signer": {"type": "string", "maxLength": 60, "x-grounded": True}}, "required": ["signer"]}


def signing(n: int, name: str) -> tuple[str, dict]:
    """A deed that writes its label twice: before a lower-case run of its prose, and before the signer's name, after a
    verb no other deed writes (so no longer label marks the names)."""
    verb = ["signed", "made", "sealed", "agreed", "drawn", "closed"][n % 6]
    return f"Deed {n}. The cost is shared between the owners. It was {verb} between {name} in {['Ohio', 'Utah'][n % 2]}.", {"signer": name}


def test_names_that_start_on_a_capital_are_learned_as_capitalized_runs(tokenizer):
    cues = by_name(learned_cues.learn(SIGNED, [signing(n, name) for n, name in enumerate(SIGNERS)]))
    options = cues["signer"].options
    assert options.get("capitalized") is True, options
    merged = learned_file.apply(SIGNED, _entries(cues.values()), "test")
    text = "Deed 9. The cost is shared between the owners. It was written between Vale Zeno and the bank."
    for name, ok in (("Vale Zeno", True), ("the owners", False), ("the bank", False)):
        constraint = Constraint.lark(grounded_lark(merged, text), tokenizer, stop_token=STOP)
        assert instance_accepted(constraint, tokenizer, {"signer": name}, separators=(",", ":")) is ok, name


TENANTS = ["Ann Lee", "Bo Carter Diaz", "Cy Dunn", "Di Evans Ford", "Ed Gray", "Flo Hart Ives"]
LEASE = {"type": "object", "properties": {"tenant": {"type": "string", "maxLength": 60, "x-grounded": True}}, "required": ["tenant"]}


def lease(n: int, name: str) -> tuple[str, dict]:
    """A lease: the tenant after its label, then a description of them that a run of words would run on into."""
    return f"Lease {n}. Signed by {name}, a tenant of {['Ohio', 'Utah', 'Iowa'][n % 3]} since {1990 + n}.", {"tenant": name}


def test_the_word_written_after_gold_names_is_learned_as_where_a_run_stops(tokenizer):
    gold = [lease(n, name) for n, name in enumerate(TENANTS)]
    cues = by_name(learned_cues.learn(LEASE, gold))
    options, evidence = cues["tenant"].options, cues["tenant"].evidence
    assert options["labels"] == ["by"] and options["lines"]["cut_before"] == "(?i:a)", options
    assert evidence["cuts"] == {"a": 6}
    merged = learned_file.apply(LEASE, _entries(cues.values()), "test")
    text, _ = lease(9, "Gus Lee")  # a tenant no row gave, whose run after the label would reach "a" within three words
    for name, ok in (("Gus Lee", True), ("Gus", True), ("Gus Lee, a", False)):
        constraint = Constraint.lark(grounded_lark(merged, text), tokenizer, stop_token=STOP)
        assert instance_accepted(constraint, tokenizer, {"tenant": name}, separators=(",", ":")) is ok, name


DEPOSIT = {"type": "object", "properties": {"deposit": {"type": ["number", "null"], "x-grounded": True}}, "required": ["deposit"]}


def order(n: int, label: str) -> tuple[str, dict]:
    """An order that writes several amounts; one order in four states a deposit, after ``label``."""
    rng = random.Random(n)
    text = f"Order {100 + n}: {rng.randint(2, 9)} crates at {rng.randint(10, 99)}.50 each, total {rng.randint(200, 900)}.00."
    deposit = rng.randint(10, 50) if n % 4 == 0 else None
    return text + (f" {label} {deposit}.00." if deposit else ""), {"deposit": deposit}


def test_a_field_mostly_null_is_null_unless_a_label_marks_its_value_well(tokenizer):
    """Where the gold is mostly null and the text writes other values, the field is null unless a label the gold
    shows marks it; where no label does (each order words it anew), it is null."""
    labelled = by_name(learned_cues.learn(DEPOSIT, [order(n, "Deposit paid:") for n in range(12)]))["deposit"].options
    assert labelled["labels"] == ["paid"] and labelled["only_labelled"] is True, labelled
    worded = ["We hold", "Kept aside", "Advance of", "Prepaid"]  # no key (``Kept aside:``): see the test below
    unlabelled = by_name(learned_cues.learn(DEPOSIT, [order(n, worded[n // 4 % 4]) for n in range(12)]))["deposit"]
    assert "labels" not in unlabelled.options and unlabelled.options["only_labelled"] is True, unlabelled.options
    assert unlabelled.evidence["pick_rate_after"] > unlabelled.evidence["pick_rate_before"]
    merged = learned_file.apply(DEPOSIT, _entries([unlabelled]), "test")
    text, _ = order(20, "Down payment")  # a new order: its amounts are no deposit the gold ever showed
    for deposit, ok in ((None, True), (45.5, False), (20, False)):
        constraint = Constraint.lark(grounded_lark(merged, text), tokenizer, stop_token=STOP)
        assert instance_accepted(constraint, tokenizer, {"deposit": deposit}, separators=(",", ":")) is ok, deposit


def test_a_grounded_enum_is_scored_by_the_members_its_text_writes():
    schema = {"type": "object", "properties": {"currency": {"enum": ["USD", "EUR"], "x-grounded": {"spellings": {"USD": ["$"], "EUR": ["€"]}}}}}
    gold = [(f"Invoice {n}: total {'$' if n % 2 else '€'} {n}0.00", {"currency": "USD" if n % 2 else "EUR"}) for n in range(6)]
    g = grounded_fields(schema)[0]
    cues = learned_cues.learn_field(g, learned_cues.field_rows(g, gold))
    assert cues.options == {} and cues.evidence["pick_rate_before"] == 1.0  # each text writes its one member (a member is no number)
