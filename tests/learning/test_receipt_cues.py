"""Cues learned from receipts made up here: a shop's address as a run of lines between its registration number and
its phone, each written in many shapes, a registered name below a brand line, and a total that a rounding line
restates."""

import json
import random

from fucina_jobs.grounding.candidates import line_runs
from fucina_jobs.grounding.declaration import grounded_fields, whole_words
from fucina_jobs.grounding.candidates import candidates, preferred, text_lines
from fucina_jobs.grounding import learned_file
from fucina_jobs.learning import learned as learned_cues

SCHEMA = {
    "type": "object",
    "properties": {
        "address": {"type": "string", "maxLength": 160, "x-grounded": {"span": "lines"}},
        "total": {"type": "number", "minimum": 0, "x-grounded": True},
    },
    "required": ["address", "total"],
    "additionalProperties": False,
}
SHOPS = ["KEDAI RUNCIT MAJU", "RESTORAN SRI MELATI", "PASAR MINI AMAN", "HARDWARE SETIA", "KEDAI BUKU CERIA", "FARMASI SEHAT"]
STREETS = ["JALAN MERANTI", "JALAN BUNGA RAYA", "JALAN PERMAS", "JALAN TASIK UTAMA"]
TOWNS = ["KLANG, SELANGOR.", "JOHOR BAHRU, JOHOR", "CHERAS, KUALA LUMPUR", "DENGKIL, SELANGOR"]


def registration(rng: random.Random) -> str:
    """A company's registration number, in one of the shapes receipts print them in."""
    digits = "".join(rng.choice("0123456789") for _ in range(rng.choice([6, 7, 9])))
    return rng.choice([f"({digits}-{rng.choice('AKTVW')})", f"JM{digits}-V", f"CO. NO: {digits}{rng.choice('KX')}"])


def receipt(n: int) -> tuple[str, dict]:
    """A receipt: the shop, its registration number, its address (a street with a number, a postcode and town),
    its phone and tax number, items and a total; one in two rounds the total on a line of its own."""
    rng = random.Random(n)
    street = f"{rng.choice(['NO. ', 'LOT ', 'NO.', ''])}{rng.randint(1, 300)}, {STREETS[n % 4]} {rng.randint(1, 9)},"
    town = f"{rng.randint(40000, 89999)} {TOWNS[n // 4 % 4]}"
    phone = rng.choice([f"TEL: 03-{rng.randint(1000, 9999)} {rng.randint(1000, 9999)}", f"TEL:01{rng.randint(2, 9)}-{rng.randint(1000000, 9999999)}"])
    items = [rng.randint(100, 4000) / 100 for _ in range(3)]
    total = round(sum(items), 2)
    rounded = round(round(total * 20) / 20, 2)
    lines = [SHOPS[n % 6] + " SDN BHD", registration(rng), street, town, phone, f"GST REG NO: {rng.randint(10**11, 10**12 - 1)}", "TAX INVOICE"]
    lines += [f"ITEM {i + 1} {price:.2f}" for i, price in enumerate(items)] + [f"TOTAL: {total:.2f}"]
    paid = total
    if n % 2 and rounded != total:
        lines += [f"ROUNDING ADJ: {rounded - total:.2f}", f"TOTAL ROUNDED: {rounded:.2f}"]
        paid = rounded
    lines += [f"CASH: {paid + rng.randint(1, 30):.2f}", "THANK YOU"]
    return "\n".join(lines), {"address": f"{street} {town}", "total": paid}


GOLD = [receipt(n) for n in range(40)]


def fields() -> dict:
    schema = learned_file.apply(SCHEMA, learned_cues.entries(learned_cues.learn(SCHEMA, GOLD)), "learned")
    return {g.name: g for g in grounded_fields(schema)}


def test_an_address_is_learned_as_the_run_of_lines_between_numbers_of_any_shape():
    address = fields()["address"]
    cut = whole_words(address.lines.cut_before)
    assert cut.search("(SA12345678-T)") and cut.search("TEL:012-3456789"), address.lines  # shapes no gold row writes
    assert not any(cut.search(label["address"]) for _, label in GOLD), address.lines
    rng = random.Random(99)
    for n in range(100, 110):
        text, label = receipt(n)
        shop, _, *rest = text.splitlines()  # its registration number in a shape no gold row writes, on the shop's line
        text = "\n".join([f"{shop} (SA{rng.randint(10**7, 10**8 - 1)}-T)", *rest])
        assert [json.loads(run) for run in line_runs(address, text)] == [label["address"]], text


def test_a_rounded_total_is_learned_as_the_label_to_prefer():
    total = fields()["total"]
    assert any("rounded" in label for label in total.preferred_labels), total
    for n in range(100, 110):
        text, label = receipt(n)
        assert preferred(total, candidates(total, text), text) == [f"{label['total']:.2f}".rstrip("0").rstrip(".")], text


def test_a_line_cut_inside_brackets_loses_the_bracket_it_opened():
    (g,) = [g.with_options({"lines.cut_before": r"\S*\d{5,}\S*"}) for g in grounded_fields(SCHEMA) if g.name == "address"]
    lines, cut = text_lines("DION REALTIES SDN BHD (CO. NO:20154-T)\nMENARA DION, 50250 KUALA LUMPUR", g)
    assert lines == ["DION REALTIES SDN BHD", "MENARA DION"] and cut == [True, True]


def test_a_top_line_that_starts_no_gold_company_is_learned_as_a_cut():
    """A greeting printed two lines above the shop's name starts runs the grammar offers and no gold value: a cut."""
    schema = {
        "type": "object",
        "properties": {"company": {"type": "string", "maxLength": 80, "x-grounded": {"span": "lines"}}},
        "required": ["company"],
        "additionalProperties": False,
    }
    gold = []
    for n in range(24):
        text, _ = receipt(n)
        shop, number, *rest = text.splitlines()
        top = [f"WELCOME TO {['MIDVALLEY', 'SUNWAY', 'IOI'][n % 3]} MALL", number] if n % 2 else [number]
        gold.append(("\n".join([*top, shop, *rest]), {"company": shop}))
    (company,) = learned_cues.learn(schema, gold)
    assert "welcome" in company.evidence["cuts"], company.evidence["cuts"]
    assert whole_words(company.options["lines"]["cut_before"]).search("WELCOME TO PAVILION MALL"), company.options


def bracketed(n: int) -> tuple[str, dict]:
    """A receipt whose registration number, in brackets, has 4 to 7 digits, and whose street number has a letter."""
    rng = random.Random(n)
    letter = rng.choice("ABCGKT")
    street = f"LOT {rng.randint(1, 9999)}-{letter}, {STREETS[n % 4]},"
    town = f"{rng.randint(40000, 89999)} {TOWNS[n // 4 % 4]}"
    number = f"({rng.randint(10 ** (n % 4 + 3), 10 ** (n % 4 + 4) - 1)}-{rng.choice('AKTVW')})"
    lines = [SHOPS[n % 6] + " SDN BHD", number, street, town, "TEL: 03-5544 3322", "TOTAL: 12.30"]
    return "\n".join(lines), {"address": f"{street} {town}"}


def test_a_number_in_brackets_is_learned_as_a_cut_where_its_bare_shape_is_a_street_number():
    """A registration number in brackets (``(8110-A)``) has the shape of a street's number (``LOT 12-A``), and its
    digits that of a postcode: the bracket that opens it is what no gold address writes."""
    gold = [bracketed(n) for n in range(40)]
    (address,) = [c for c in learned_cues.learn(SCHEMA, [(text, label | {"total": 12.3}) for text, label in gold]) if c.name == "address"]
    cut = whole_words(address.options["lines"]["cut_before"])
    assert cut.search("(8110-A)") and cut.search("(1074617-K)"), address.options
    assert not any(cut.search(label["address"]) for _, label in gold), address.options
    (g,) = [g for g in grounded_fields(learned_file.apply(SCHEMA, learned_cues.entries([address]), "learned")) if g.name == "address"]
    for n in range(100, 110):
        text, label = bracketed(n)
        assert [json.loads(run) for run in line_runs(g, text)][:1] == [label["address"]], text


def test_a_run_of_lines_offered_first_weighs_more_than_one_offered_after_others():
    """A greedy decoder copies from the top: the pick rate of a run of lines weighs the gold value by where the
    grammar offers it, so a shop's name above its other lines scores more than the same name below them."""
    schema = {
        "type": "object",
        "properties": {"company": {"type": "string", "maxLength": 80, "x-grounded": {"span": "lines"}}},
        "required": ["company"],
        "additionalProperties": False,
    }
    on_top, below = [], []
    for n in range(12):
        shop, others = SHOPS[n % 6] + " SDN BHD", [f"NO. {n + 1}, {STREETS[n % 4]}", "THANK YOU"]
        on_top.append(("\n".join([shop, *others]), {"company": shop}))
        below.append(("\n".join([*others, shop]), {"company": shop}))
    (top,), (bottom,) = learned_cues.learn(schema, on_top), learned_cues.learn(schema, below)
    assert top.evidence["pick_rate_before"] > 2 * bottom.evidence["pick_rate_before"], (top.evidence, bottom.evidence)


def branded(n: int) -> tuple[str, dict]:
    """A receipt whose registered name (``... SDN BHD``, ``... ENTERPRISE``) sits below a brand line in two of three."""
    text, _ = receipt(n)
    _, number, *rest = text.splitlines()
    name = SHOPS[n % 6] + [" SDN BHD", " ENTERPRISE", " TRADING"][n // 6 % 3]
    brand = ["MYDIN", "SUSHI MENTAI", "FAMILYMART", "BASKIN ROBBINS", "OLD TOWN", "TEALIVE", "AEON"][n % 7]
    top = [brand, name] if n % 3 else [name]
    return "\n".join([*top, number, *rest]), {"company": name}


def test_a_registered_name_below_a_brand_line_is_offered_first():
    """The legal forms that end a name and ``shortest`` help only together (a run from the brand line ends on the
    name's line too), and only with the brand's line among the top lines: learned together, they offer the
    registered name first."""
    schema = {
        "type": "object",
        "properties": {"company": {"type": "string", "maxLength": 80, "x-grounded": {"span": "lines"}}},
        "required": ["company"],
        "additionalProperties": False,
    }
    (company,) = learned_cues.learn(schema, [branded(n) for n in range(36)])
    (g,) = grounded_fields(learned_file.apply(schema, learned_cues.entries([company]), "learned"))
    for n in range(100, 112):
        text, label = branded(n)
        assert [json.loads(run) for run in line_runs(g, text)][:1] == [label["company"]], (company.options, text)
