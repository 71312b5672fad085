"""Reports that stay readable at 10,000 schemas: a synthetic suite result, no model and no mask walks."""

import json
import random
import struct

from fucina_jobs.eval.cli import summary
from fucina_jobs.eval.maskbench import KNOWN_LIMITATIONS, PROPERTY_ORDER
from fucina_jobs.eval.report import TOP_FEATURES, report_files
from fucina_jobs.eval.scoring import grammar_scores, grammar_timing

FILES = 10_000


def _suite_result(rng: random.Random) -> dict:
    """What ``run_suite`` returns for a large suite: hundreds of features, dozens of causes, long messages."""
    features = [f"feature_{k}" for k in range(230)]
    errors = [f'Unimplemented keys: ["{k}"]' for k in ("not", "uniqueItems", "contains")] + [f"Unknown format: fmt-{k}" for k in range(40)]
    errors += [f"some new refusal of kind {chr(97 + k // 26)}{chr(97 + k % 26)} nobody has seen, with a long explanation " * 3 for k in range(60)]
    report = {
        "files": FILES,
        "instances": 0,
        "valid": 0,
        "invalid": 0,
        "skipped": 0,
        "compile_errors": {},
        "relaxations": {},
        "features": {},
        "tests": {},
        "compile_s": {},
        "mask_s": [rng.random() * 1e-4 for _ in range(1000)],
        "verdicts": [],
    }
    for i in range(FILES):
        name = f"Suite---schema_with_a_rather_long_file_name_{i:05d}.json"
        report["features"][name] = rng.sample(features, 6)
        report["tests"][name] = 4
        if i % 7 == 0:
            report["compile_errors"][name] = rng.choice(errors)
            report["skipped"] += 4
            report["verdicts"].append(
                {
                    "file": name,
                    "instance": -1,
                    "expected": None,
                    "accepted": None,
                    "final": None,
                    "cause": None,
                    "compile_error": report["compile_errors"][name],
                    "relaxations": [],
                }
            )
            continue
        report["compile_s"][name] = 0.002
        relaxed = [rng.choice(["not", "format=x", "oneOf", "regex=(?=a)"])] if i % 5 == 0 else []
        if relaxed:
            report["relaxations"][name] = relaxed
        for k in range(4):
            expected = k < 2
            wrong = rng.random() < 0.01
            cause = (PROPERTY_ORDER if expected else "invalid passes post-validation") if wrong else None
            report["instances"] += 1
            report["valid" if expected else "invalid"] += 1
            report["verdicts"].append(
                {
                    "file": name,
                    "instance": k,
                    "expected": expected,
                    "accepted": expected != wrong,
                    "final": expected != wrong,
                    "cause": cause,
                    "compile_error": None,
                    "relaxations": relaxed,
                }
            )
    return report


def test_report_of_a_10000_schema_run_stays_small(tmp_path):
    report = _suite_result(random.Random(0))
    g = grammar_scores(report, KNOWN_LIMITATIONS)
    assert len(g["compile_errors"]) > 50 and all(len(e["examples"]) <= 3 for e in g["compile_errors"].values())
    scores = {
        "name": "big",
        "mode": "grammar",
        "run_dir": str(tmp_path),
        "content_hash": "h",
        "config": {"tokenizer": "default", "baseline": None},
        "grammar": g,
        "timing": grammar_timing(report),
    }
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    for name, data in report_files(scores).items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)
    md = (tmp_path / "report.md").read_text()
    assert len(md.encode()) < 30_000, len(md.encode())
    assert f"top {TOP_FEATURES} of 230" in md and "Suite---schema_with_a_rather_long_file_name_09994.json" not in md
    assert (tmp_path / "report.html").stat().st_size < 200_000
    png = (tmp_path / "plots" / "conformance_by_feature.png").read_bytes()
    width, height = struct.unpack(">II", png[16:24])
    assert height < 1200, height
    lines = summary(scores).splitlines()
    assert len(lines) <= 8 and max(len(line) for line in lines if not line.startswith("wrote")) < 400
