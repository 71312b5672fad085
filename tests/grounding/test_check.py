"""The post-check and the run alarm, on hand-made records."""

from fucina_jobs.grounding.alarm import THRESHOLDS, Output, measure, prompt_text
from fucina_jobs.grounding.check import ungrounded_values
from fucina_jobs.grounding.declaration import grounded_fields

SCHEMA = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "x-grounded": True},
        "buyer": {"type": "string", "x-grounded": {"case": "insensitive"}},
        "total": {"type": "number", "x-grounded": {"allow": [0]}},
        "due": {"type": ["string", "null"], "format": "date", "x-grounded": True},
        "lines": {"type": "array", "items": {"type": "number", "x-grounded": True}},
        "currency": {"enum": ["EUR", "USD"], "x-grounded": {"spellings": {"EUR": ["€"]}}},
    },
}
TEXT = "Nordlicht\nBakery GmbH bills ACME TOOLS: 2 x 10,00 € = 20,00 €, due 03.04.2025"
FIELDS = grounded_fields(SCHEMA)


def check(record):
    return ungrounded_values(record, FIELDS, TEXT)


def test_grounded_values_pass():
    record = {"vendor": "Nordlicht Bakery GmbH", "buyer": "Acme Tools", "total": 20, "due": "2025-04-03", "lines": [10.0, 20], "currency": "EUR"}
    assert check(record) == (7, [])


def test_misses_are_named_field_by_field():
    record = {"vendor": "Pinewood Labels Ltd", "buyer": "ACME", "total": 1608, "due": "2024-10-02", "lines": [10, 11], "currency": "USD"}
    assert check(record) == (7, ["vendor='Pinewood Labels Ltd'", "total=1608", "due='2024-10-02'", "lines[]=11", "currency='USD'"])


def test_allowances_nulls_and_empty_strings():
    assert check({"total": 0, "due": None}) == (1, [])
    assert check({"vendor": ""}) == (1, ["vendor=''"])
    assert check({"total": False}) == (1, ["total=False"])


def test_alarm_is_quiet_on_grounded_distinct_records():
    outputs = [
        Output({"vendor": "Nordlicht", "total": 20, "currency": "EUR"}, TEXT, SCHEMA),
        Output({"vendor": "ACME", "total": 10, "currency": "EUR"}, TEXT, SCHEMA),
    ]
    alarm = measure(outputs, prompt_text("Extract the vendor; currency is EUR or USD.", "Text: {text}"))
    assert alarm.warnings() == []
    assert alarm.shares() == {"ungrounded_values": 0.0, "duplicate_records": 0.0, "prompt_copies": 0.0}


def test_alarm_fires_on_copies_duplicates_and_ungrounded_values():
    copied = {"vendor": "Pinewood Labels Ltd", "total": 1608, "due": "2024-10-02", "currency": "EUR"}
    outputs = [Output(copied, TEXT, SCHEMA, is_record=False)] + [Output(copied, f"document {k}", SCHEMA) for k in range(3)]
    prompt = prompt_text("Example: Pinewood Labels Ltd, due 2 October 2024, total £1,608.00", "Invoice: {text}")
    alarm = measure(outputs, prompt)
    shares = alarm.shares()
    assert shares["ungrounded_values"] == 15 / 16  # four rows (the rejected one included); only the first writes €
    assert shares["duplicate_records"] == 1.0
    assert shares["prompt_copies"] == 1.0  # vendor, total and due in each record; the enum is exempt
    assert len(alarm.warnings()) == 3 and all("alarm above" in w for w in alarm.warnings())
    assert alarm.as_dict()["thresholds"] == THRESHOLDS
