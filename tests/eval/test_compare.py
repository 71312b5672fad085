"""``compare`` and the content hash on hand-built run directories (no model)."""

import json
import subprocess
import sys

from fucina_jobs.eval.compare import compare, score_diff
from fucina_jobs.eval.runs import content_hash, read_run

from tests.helpers import REPO, make_run

RECORDS = [{"row_id": "b", "text": '{"x": 2}'}, {"row_id": "a", "text": '{"x": 1}'}]
REJECTS = [{"row_id": "c", "reason": "length", "text": '{"x": '}]
STATS = [{"shard": 0, "replica": 0, "rows": 3, "wall_s": 1.0, "tok_s": 10.0}]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "fucina_jobs", "compare", *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_hash_ignores_order_timings_and_ids_but_not_content(tmp_path):
    a = make_run(tmp_path / "a", RECORDS, REJECTS, STATS)
    b = make_run(
        tmp_path / "b", RECORDS[::-1], REJECTS, [{**STATS[0], "wall_s": 9.0, "tok_s": 1.0}], manifest={"status": "complete", "started": "later"}
    )
    assert content_hash(read_run(a)) == content_hash(read_run(b))
    for records, rejects in [
        ([RECORDS[0], {"row_id": "a", "text": '{"x": 9}'}], REJECTS),  # a text changed
        (RECORDS, [{**REJECTS[0], "reason": "invalid_json"}]),  # a reason changed
        (RECORDS[:1], REJECTS),  # a row missing
        ([*RECORDS, {"row_id": "c", "text": '{"x": 3}'}], []),  # a reject became a record
    ]:
        other = make_run(tmp_path / f"o{len(list(tmp_path.iterdir()))}", records, rejects, STATS)
        assert content_hash(read_run(other)) != content_hash(read_run(a))


def test_compare_identical_runs_exits_0(tmp_path):
    a = make_run(tmp_path / "a", RECORDS, REJECTS, STATS)
    b = make_run(tmp_path / "b", RECORDS[::-1], REJECTS, [{**STATS[0], "wall_s": 5.0}])
    res = _cli(a, b)
    assert res.returncode == 0, res.stderr
    assert "identical outputs" in res.stdout


def test_compare_different_runs_shows_records_and_scores_and_exits_1(tmp_path):
    a = make_run(tmp_path / "a", RECORDS, REJECTS, STATS)
    b = make_run(tmp_path / "b", [RECORDS[0], {"row_id": "a", "text": '{"x": 7}'}], REJECTS, STATS)
    for run, rate in ((a, 1.0), (b, 0.5)):
        scores = {
            "name": "hand",
            "content_hash": "h",
            "run_dir": str(run),
            "accuracy": {"fields": {"x": {"rate": rate}}},
            "efficiency": {"tok_s": rate},
        }
        (run / "scores.json").write_text(json.dumps(scores))
    result = compare(a, b)
    assert not result.identical
    assert [r[0] for r in result.records] == ["a"]
    assert result.scores == [("accuracy.fields.x.rate", 1.0, 0.5)]  # efficiency and run_dir are not compared
    res = _cli(a, b)
    assert res.returncode == 1
    assert "DIFFERENT outputs: 1 output(s) differ" in res.stdout and '{"x": 7}' in res.stdout and "accuracy.fields.x.rate" in res.stdout


def test_compare_a_missing_run_is_a_usage_error(tmp_path):
    a = make_run(tmp_path / "a", RECORDS, REJECTS, STATS)
    res = _cli(a, tmp_path / "nope")
    assert res.returncode == 2 and "holds no run" in res.stderr


def test_score_diff_without_scores_is_empty():
    assert score_diff(None, {"a": 1}) == [] and score_diff({"a": {"b": 1}}, {"a": {"b": 2}}) == [("a.b", 1, 2)]
