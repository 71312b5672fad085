import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fucina_jobs.pipeline.config import ConfigError, DatasetConfig
from fucina_jobs.pipeline.dataset import read_rows


def _cfg(path, **kw):
    return DatasetConfig(path=str(path), **kw)


def test_jsonl_malformed_rows_are_kept_with_their_problem(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text('{"id": "a", "text": "hello"}\n{not json\n[1, 2]\n{"id": "d"}\n\n{"text": "no id"}\n')
    rows = read_rows(_cfg(f), tmp_path)
    assert [r.id for r in rows] == ["a", "row-1", "row-2", "d", "row-4"]
    assert rows[0].problem is None
    assert "in.jsonl:2: not valid JSON" in rows[1].problem
    assert "expected a JSON object" in rows[2].problem
    assert "missing or empty text field 'text'" in rows[3].problem
    assert "missing id field 'id'" in rows[4].problem


def test_csv_parquet_and_text_dir(tmp_path):
    (tmp_path / "in.csv").write_text("id,text\nx,one\ny,two\n")
    assert [r.fields["text"] for r in read_rows(_cfg(tmp_path / "in.csv", format="csv"), tmp_path)] == ["one", "two"]
    pq.write_table(pa.Table.from_pylist([{"key": 7, "body": "seven"}]), tmp_path / "in.parquet")
    rows = read_rows(_cfg(tmp_path / "in.parquet", format="parquet", id_field="key", text_field="body"), tmp_path)
    assert rows[0].id == "7" and rows[0].problem is None
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "b.txt").write_text("bee")
    (docs / "a.txt").write_text("ay")
    assert [(r.id, r.fields["text"]) for r in read_rows(_cfg(docs, format="text_dir"), tmp_path)] == [("a", "ay"), ("b", "bee")]


def test_limit_and_missing_file(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps({"id": i, "text": "t"}) + "\n" for i in range(5)))
    assert len(read_rows(_cfg(f, limit=3), tmp_path)) == 3
    with pytest.raises(ConfigError, match="does not exist"):
        read_rows(_cfg(tmp_path / "nope.jsonl"), tmp_path)


def test_duplicate_ids_are_an_error_naming_the_rows(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    with pytest.raises(ConfigError, match="rows 0 and 1 share the id 'a'"):
        read_rows(_cfg(f), tmp_path)
