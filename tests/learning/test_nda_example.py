"""The newcomer's NDA job of docs/examples/nda, which docs/ACCURACY.md's learned-cues figures run.

Optional: it reads ``../shared/data/nda-train`` (skipped where that folder is absent)."""

import json
from pathlib import Path

import pytest

from fucina_jobs.learn_command import learn_command

REPO = Path(__file__).resolve().parents[2]
NDA = REPO.parent / "shared/data/nda-train"


@pytest.mark.skipif(not NDA.exists(), reason="../shared/data/nda-train is absent")
def test_the_documented_nda_job_learns_its_party_cues_from_ten_gold_rows(tmp_path, monkeypatch):
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join((NDA / "gold.jsonl").read_text().splitlines(keepends=True)[:10]))
    monkeypatch.chdir(REPO)
    out = tmp_path / "learned.json"
    assert learn_command(["--config-dir", "docs/examples/nda", "conf=nda", f"gold={gold}", f"out={out}"]) == 0
    fields = json.loads(out.read_text())["fields"]
    assert set(fields) >= {"party[]", "effective_date", "jurisdiction", "term"}, sorted(fields)
    party = fields["party[]"]["x-grounded"]
    assert party["labels"] and party["case"] == "title", party  # the gold re-cases names the contracts write in capitals
