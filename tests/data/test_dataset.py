import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fucina_jobs.config import ConfigError, DatasetConfig
from fucina_jobs.data.dataset import read_rows


def _cfg(path, **kw):
    return DatasetConfig(path=str(path), **kw)


def test_jsonl_malformed_rows_are_kept_with_their_problem(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text('{"id": "a", "text": "hello"}\n{not json\n[1, 2]\n{"id": "d"}\n\n{"text": "no id"}\n')
    rows = read_rows(_cfg(f), tmp_path)
    assert [r.id for r in rows] == ["a", "in.jsonl:2", "in.jsonl:3", "d", "in.jsonl:6"]  # an id-less row is named by its file and line
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


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "text_dir", "glob"])
def test_scan_then_read_slice_gives_back_the_rows_read_rows_reads(tmp_path, fmt):
    """The driver keeps only ids, digests and locations; a replica reading any slice gets the same rows back."""
    from fucina_jobs.data.dataset import read_slice, scan

    if fmt == "jsonl":
        (tmp_path / "in.jsonl").write_bytes(
            b'\xef\xbb\xbf{"id": "a", "text": "hi"}\n{bad\n\n{"id": "c", "text": "caf\xe9"}\n{"id": "d", "text": "x"}\n'
        )
        cfg = _cfg(tmp_path / "in.jsonl")
    elif fmt == "csv":
        (tmp_path / "in.csv").write_text('\ufeffid,text\nx,"two\nlines"\n\ny,two\nz,three,extra\n')
        cfg = _cfg(tmp_path / "in.csv", format="csv")
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist([{"id": i, "text": f"t{i}"} for i in range(10)]), tmp_path / "in.parquet", row_group_size=3)
        cfg = _cfg(tmp_path / "in.parquet", format="parquet")
    elif fmt == "text_dir":
        (tmp_path / "docs" / "sub").mkdir(parents=True)
        (tmp_path / "docs" / "a.txt").write_text("ay")
        (tmp_path / "docs" / "sub" / "b.md").write_bytes(b"\x00")
        cfg = _cfg(tmp_path / "docs", format="text_dir")
    else:
        for part in ("p1", "p2"):
            (tmp_path / f"{part}.jsonl").write_text("".join(json.dumps({"id": f"{part}-{i}", "text": "t"}) + "\n" for i in range(3)))
        cfg = _cfg(tmp_path / "p*.jsonl")
    rows = read_rows(cfg, tmp_path)
    index = scan(cfg, tmp_path)
    assert len(index) == len(rows) >= 2
    as_tuples = [(r.id, r.index, r.fields, r.problem, r.digest) for r in rows]
    back = [read_slice(cfg, index.slice(index.table.slice(i, 2))) for i in range(0, len(rows), 2)]
    assert [(r.id, r.index, r.fields, r.problem, r.digest) for piece in back for r in piece] == as_tuples
    assert index.table.column("digest").to_pylist() == [r.digest for r in rows]


def test_duplicate_ids_across_globbed_files_are_an_error(tmp_path):
    for part in ("p1", "p2"):
        (tmp_path / f"{part}.jsonl").write_text(json.dumps({"id": "same", "text": part}) + "\n")
    from fucina_jobs.data.dataset import scan

    with pytest.raises(ConfigError, match="rows 0 and 1 share the id 'same'"):
        scan(_cfg(tmp_path / "*.jsonl"), tmp_path)
