"""Issue 28, dataset input: files as real datasets bring them, read right or refused in one line before any work.

No Ray and no model here: ``scan`` (the driver's pass) and ``read_slice`` (a
replica's) are called directly, so each case costs milliseconds.
"""

import bz2
import gzip
import hashlib
import json
import lzma
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fucina_jobs.config import ConfigError, DatasetConfig
from fucina_jobs.data.dataset import DatasetChanged, check_output_outside, read_rows, read_slice, scan
from fucina_jobs.run_info import file_hash

from tests.helpers import REPO

ROWS = [{"id": f"r{i:04d}", "text": f"Invoice {i} from Acme, total {i * 7} EUR."} for i in range(2000)]
JSONL = "".join(json.dumps(r) + "\n" for r in ROWS).encode()


def _cfg(path, **kw) -> DatasetConfig:
    return DatasetConfig(path=str(path), **kw)


def _refused(path, *words, **kw) -> str:
    with pytest.raises(ConfigError) as err:
        scan(_cfg(path, **kw), path.parent)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    return message


def _slices(cfg, base, size: int) -> list:
    """Every row as replicas read them back, ``size`` rows a slice."""
    index = scan(cfg, base)
    return [row for start in range(0, len(index), size) for row in read_slice(cfg, index.slice(index.table.slice(start, size)))]


# -- compressed files ----------------------------------------------------------------


def _zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as f:
        f.write(data)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(
    "name, compress",
    [
        ("in.jsonl.gz", gzip.compress),
        ("in.jsonl.bz2", bz2.compress),
        ("in.jsonl.xz", lzma.compress),
        ("in.jsonl.zst", _zstd),
        ("no-suffix", gzip.compress),
    ],
)
def test_compressed_jsonl_reads_every_row_by_its_magic_bytes_and_slices_read_back(tmp_path, name, compress):
    """Defect 2: big.jsonl.gz gave one garbage reject per line break of the gzip stream and none of its rows."""
    path = tmp_path / name
    path.write_bytes(compress(JSONL))
    cfg = _cfg(path)
    rows = _slices(cfg, tmp_path, 700)  # three slices: the later ones decompress and skip to their rows
    assert [(r.id, r.problem) for r in rows] == [(row["id"], None) for row in ROWS]
    assert rows[-1].fields["text"] == ROWS[-1]["text"]
    assert scan(cfg, tmp_path).hash == hashlib.sha256(JSONL).hexdigest(), "the hash is of the rows' bytes, whatever the compression"


def test_compressed_csv_with_a_quoted_newline_reads_back(tmp_path):
    path = tmp_path / "in.csv.gz"
    path.write_bytes(gzip.compress(b'id,text\na,"one\nline two"\nb,two\nc,three\n'))
    rows = _slices(_cfg(path, format="csv"), tmp_path, 1)
    assert [(r.id, r.fields["text"]) for r in rows] == [("a", "one\nline two"), ("b", "two"), ("c", "three")]


def test_a_compressed_file_cut_short_is_one_line(tmp_path):
    path = tmp_path / "in.jsonl.gz"
    whole = gzip.compress(JSONL)
    path.write_bytes(whole[: len(whole) // 2])
    _refused(path, "in.jsonl.gz", "cannot read it to the end", "damaged or cut short")


def test_text_dir_documents_may_be_compressed(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt.gz").write_bytes(gzip.compress(b"gzipped invoice"))
    (docs / "b.txt").write_text("plain invoice")
    (docs / "c.txt.gz").write_bytes(gzip.compress(b"cut short" * 100)[:20])
    rows = {r.id: r for r in _slices(_cfg(docs, format="text_dir"), tmp_path, 1)}
    assert rows["a"].fields["text"] == "gzipped invoice" and rows["b"].problem is None
    assert "c.txt.gz: cannot decompress it" in rows["c"].problem


# -- encodings and wrong formats --------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_a_utf16_or_utf32_file_is_one_line_naming_it(tmp_path, encoding):
    """Defect 2: a UTF-16 file (PowerShell's `>`) gave 5 rows in and 6 garbage rejects out."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(JSONL[:400].decode().encode(encoding))
    wide = "UTF-32" if "32" in encoding else "UTF-16"
    _refused(path, "in.jsonl", f"is {wide} text", "save it as UTF-8")
    path.rename(tmp_path / "in.csv")
    _refused(tmp_path / "in.csv", "in.csv", wide, format="csv")


def test_a_utf16_document_in_a_text_dir_is_a_reject_naming_it(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ps.txt").write_bytes("Invoice 7".encode("utf-16"))
    (docs / "ok.txt").write_text("Invoice 8")
    rows = {r.id: r for r in read_rows(_cfg(docs, format="text_dir"), tmp_path)}
    assert rows["ps"].problem == "ps.txt: UTF-16 text, not UTF-8; save it as UTF-8" and rows["ok"].problem is None


def test_wrong_formats_say_what_to_set(tmp_path):
    """Tracebacks list: wrong formats ended exit 0 with garbage rejects."""
    pq.write_table(pa.Table.from_pylist(ROWS[:3]), tmp_path / "rows.parquet")
    _refused(tmp_path / "rows.parquet", "rows.parquet is a Parquet file", "dataset.format=parquet")
    _refused(tmp_path / "rows.parquet", "dataset.format=parquet", format="csv")
    (tmp_path / "rows.csv").write_text("id,text\na,one\nb,two\n")
    _refused(tmp_path / "rows.csv", "looks like CSV", "'id,text'", "dataset.format=csv")
    (tmp_path / "array.json").write_text(json.dumps(ROWS[:3]))
    _refused(tmp_path / "array.json", "a JSON array of objects", "jq -c '.[]'")
    (tmp_path / "big-array.json").write_text(json.dumps(ROWS))  # one line, longer than what sniff reads
    _refused(tmp_path / "big-array.json", "a JSON array of objects")
    (tmp_path / "pretty.json").write_text(json.dumps(ROWS[:3], indent=2))
    _refused(tmp_path / "pretty.json", "pretty-printed JSON", "jq -c '.[]'")
    (tmp_path / "objects.json").write_text("\n".join(json.dumps(r, indent=2) for r in ROWS[:3]))
    _refused(tmp_path / "objects.json", "pretty-printed JSON", "jq -c '.'")
    (tmp_path / "mac.jsonl").write_bytes(JSONL[:500].replace(b"\n", b"\r"))
    _refused(tmp_path / "mac.jsonl", "a lone CR", "tr '\\r' '\\n'")
    (tmp_path / "rows.txt").write_bytes(JSONL[:500])
    _refused(tmp_path / "rows.txt", "holds JSON Lines", "dataset.format=jsonl", format="csv")
    (tmp_path / "blob.jsonl").write_bytes(b'{"id": "a"}\x00\x01\x02')
    _refused(tmp_path / "blob.jsonl", "not a text file", "NUL byte")


def test_what_jsonl_really_allows_still_reads(tmp_path):
    """The sniffing refuses whole files only: CRLF ends, one bad first line, an array row and a UTF-8 BOM stay row problems."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "text": "x"}\r\n[1, 2]\r\n{"id": "b", "text": "y"}\r\n')
    assert [(r.id, r.problem is None) for r in read_rows(_cfg(path), tmp_path)] == [("a", True), ("in.jsonl:2", False), ("b", True)]
    path.write_text('{not json, at all\n{"id": "b", "text": "y"}\n')
    assert [r.id for r in read_rows(_cfg(path), tmp_path)] == ["in.jsonl:1", "b"]
    long = {"id": "long", "text": "," * 100_000}  # a first row longer than what sniff reads, cut after a comma
    path.write_text(json.dumps(long) + "\n")
    assert [(r.id, r.problem) for r in read_rows(_cfg(path), tmp_path)] == [("long", None)]


def test_parquet_folder_without_parquet_files_says_what_it_holds(tmp_path):
    """Tracebacks list: dataset.format=parquet on a folder of jsonl files was a 0-row `complete`."""
    folder = tmp_path / "exports"
    folder.mkdir()
    for part in ("a", "b"):
        (folder / f"{part}.jsonl").write_bytes(JSONL[:200])
    _refused(folder, "no .parquet files", "a.jsonl, b.jsonl", "dataset.format=jsonl", format="parquet")
    pq.write_table(pa.Table.from_pylist(ROWS[:2]), folder / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS[2:3]), folder / "_hidden.parquet")  # Arrow's rule: _ and . names are not data
    assert [r.id for r in read_rows(_cfg(folder, format="parquet"), tmp_path)] == ["r0000", "r0001"]


def test_a_binary_parquet_text_column_is_decoded_when_it_is_utf8(tmp_path):
    """Tracebacks list: a text column stored as binary was rejected as "missing or empty text"."""
    table = pa.table({"id": pa.array([b"x", b"y"], pa.binary()), "text": pa.array(["Invoice 1".encode(), b"\xff\xfe"], pa.binary())})
    pq.write_table(table, tmp_path / "bin.parquet")
    cfg = _cfg(tmp_path / "bin.parquet", format="parquet")
    rows = _slices(cfg, tmp_path, 1)
    assert (rows[0].id, rows[0].fields["text"], rows[0].problem) == ("x", "Invoice 1", None)
    assert rows[1].id == "y" and rows[1].problem == "bin.parquet row 1: text field 'text' holds bytes that are not UTF-8 text"


def test_a_row_nested_100000_deep_is_its_own_reject(tmp_path):
    """Tracebacks list: 100,000 nested `[` raised RecursionError in the driver, on every rerun."""
    path = tmp_path / "in.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(
        "\n".join(
            [json.dumps(ROWS[0]), "[" * 100_000, '{"id": "deep", "text": "t", "x": ' + deep + "}", json.dumps({"id": "brackets", "text": "[" * 5000})]
        )
        + "\n"
    )
    rows = _slices(_cfg(path), tmp_path, 2)
    assert [(r.id, r.problem) for r in rows] == [
        ("r0000", None),
        ("in.jsonl:2", "in.jsonl:2: JSON nested deeper than 128 levels"),
        ("in.jsonl:3", "in.jsonl:3: JSON nested deeper than 128 levels"),
        ("brackets", None),
    ]


# -- paths -----------------------------------------------------------------------------------


def test_brackets_in_a_file_name_or_the_working_directory_are_no_glob(tmp_path):
    """Tracebacks list: brackets turned the path into a glob that "matches no file"."""
    folder = tmp_path / "jobs [2024]"
    folder.mkdir()
    (folder / "in[1].jsonl").write_bytes(JSONL[:300])
    rows = read_rows(_cfg("in[1].jsonl"), folder)  # relative to a working directory with brackets
    assert [r.id for r in rows][:2] == ["r0000", "r0001"]
    (folder / "part-2.jsonl").write_bytes(JSONL[300:600])
    assert len(read_rows(_cfg("part-*.jsonl"), folder)) >= 2, "a glob below a bracketed folder still globs"
    _refused(folder / "missing[1].jsonl", "missing[1].jsonl", "matches no file")


def test_stdin_and_named_pipes_are_one_line_saying_what_to_do(tmp_path):
    """Tracebacks list: /dev/stdin gave "matches no file", a named pipe "lseek failed"."""
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    _refused(fifo, "is a named pipe, not a file", "save it to a file first")
    script = (
        "from pathlib import Path\nfrom fucina_jobs.config import DatasetConfig\nfrom fucina_jobs.data.dataset import scan\n"
        "try:\n    index = scan(DatasetConfig(path='/dev/stdin'), Path('.'))\n    print(len(index), index.root)\n"
        "except Exception as err:\n    print(type(err).__name__, err)\n"
    )
    res = subprocess.run([sys.executable, "-c", script], input='{"id": "a", "text": "x"}\n', capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.stdout.startswith("ConfigError dataset.path /dev/stdin is a named pipe, not a file"), res.stdout + res.stderr[-2000:]
    (tmp_path / "in.jsonl").write_bytes(JSONL[:300])
    with open(tmp_path / "in.jsonl") as stdin:  # `< in.jsonl`: the file itself, which a replica can open (its own stdin is not it)
        res = subprocess.run([sys.executable, "-c", script], stdin=stdin, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.stdout.strip() == f"{len(read_rows(_cfg(tmp_path / 'in.jsonl'), tmp_path))} {tmp_path / 'in.jsonl'}", res.stdout + res.stderr[-2000:]


def test_a_row_without_an_id_is_named_by_file_and_line_and_a_clash_says_so(tmp_path):
    """Tracebacks list: an id-less row became `row-1`, clashing with a real `row-1` behind a confusing message."""
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "row-1", "text": "x"}\n{"text": "no id"}\n')
    rows = read_rows(_cfg(path), tmp_path)
    assert [r.id for r in rows] == ["row-1", "in.jsonl:2"] and "(this reject is named 'in.jsonl:2')" in rows[1].problem
    path.write_text('{"id": "in.jsonl:2", "text": "x"}\n{"text": "no id"}\n')
    _refused(path, "row 1 has no id field 'id'", "named 'in.jsonl:2'", "which row 0 has as its id", "give row 1 an id")


def test_output_dir_inside_the_dataset_is_refused_naming_both(tmp_path):
    """Defect 3: a parquet folder or a text_dir read its own outputs (logs, manifest, shards) back as rows."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for fmt in ("text_dir", "parquet"):
        with pytest.raises(ConfigError, match=rf"output.dir {docs}/out is inside dataset.path {docs}: .*choose an output.dir outside"):
            check_output_outside(_cfg(docs, format=fmt), str(docs / "out"), tmp_path)
    os.symlink(docs, tmp_path / "link")
    with pytest.raises(ConfigError, match="is inside dataset.path"):
        check_output_outside(_cfg(tmp_path / "link", format="text_dir"), str(docs / "labels"), tmp_path)
    with pytest.raises(ConfigError, match=r"reached by the glob dataset.path .*\*\*/\*.parquet"):
        check_output_outside(_cfg(f"{tmp_path}/**/*.parquet", format="parquet"), str(tmp_path / "out"), tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "cli.log").write_text("")
    with pytest.raises(ConfigError, match=r"and delete .*/out, which holds only this command's cli.log"):
        check_output_outside(_cfg(tmp_path, format="text_dir"), str(tmp_path / "out"), tmp_path)
    # Beside the dataset is fine: a file's own folder, a glob that cannot reach the outputs.
    (tmp_path / "in.jsonl").write_bytes(JSONL[:100])
    check_output_outside(_cfg(tmp_path / "in.jsonl"), str(tmp_path / "out"), tmp_path)
    check_output_outside(_cfg(f"{tmp_path}/*.jsonl"), str(tmp_path / "out"), tmp_path)
    check_output_outside(_cfg(docs, format="text_dir"), str(tmp_path / "out"), tmp_path)


# -- text_dir: links, loops, names --------------------------------------------------------------


def test_text_dir_reads_each_real_file_once_and_turns_loops_and_dangling_links_into_rejects(tmp_path):
    """Defect 7: `loop -> .` gave 81 records from 2 files, 40 levels deep; a dangling link was skipped silently."""
    docs, elsewhere = tmp_path / "docs", tmp_path / "shared"
    (docs / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    (docs / "a.txt").write_text("invoice a")
    (docs / "sub" / "b.txt").write_text("invoice b")
    (elsewhere / "c.txt").write_text("invoice c")
    os.symlink(".", docs / "loop")
    os.symlink("..", docs / "sub" / "up")
    os.symlink("missing.txt", docs / "dangling.txt")
    os.symlink("a.txt", docs / "alias.txt")
    os.link(docs / "a.txt", docs / "z-hardlink.txt")
    os.symlink(elsewhere, docs / "shared")  # a folder outside: followed, once
    os.symlink("self", docs / "self")
    os.mkfifo(docs / "pipe.txt")
    (docs / os.fsdecode(b"caf\xe9.txt")).write_text("latin-1 name")
    cfg = _cfg(docs, format="text_dir")
    rows = {r.id: r for r in _slices(cfg, tmp_path, 3)}
    assert {i for i, r in rows.items() if r.problem is None} == {"a", "sub/b", "shared/c"}
    assert set(rows) == {"a", "sub/b", "shared/c", "loop", "sub/up", "dangling", "alias", "z-hardlink", "self", "pipe", "caf\\xe9"}
    assert rows["loop"].problem == "loop (-> .): a link to a folder that is read already (a loop); skipped, so that nothing is read twice"
    assert "sub/up (-> ..): a link to a folder that is read already" in rows["sub/up"].problem
    assert rows["dangling"].problem == "dangling.txt (-> missing.txt): a dangling symlink, its target does not exist"
    assert rows["alias"].problem.startswith("alias.txt (-> a.txt): the same file as a.txt, which is read already")
    assert rows["z-hardlink"].problem.startswith("z-hardlink.txt: the same file as a.txt")
    assert "cannot be followed" in rows["self"].problem and "a named pipe" in rows["pipe"].problem
    assert rows["caf\\xe9"].problem == "b'caf\\xe9.txt': the file name is not valid UTF-8; rename it"


# -- the dataset changing under a run ------------------------------------------------------------


def test_a_replica_refuses_rows_that_are_not_the_ones_the_scan_indexed(tmp_path):
    """Defect 1: a file replaced during a run was read at the old byte ranges, and never checked."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(JSONL[:2000])
    cfg = _cfg(path)
    index = scan(cfg, tmp_path)
    piece = index.slice(index.table.slice(2, 3))
    assert index.hash == file_hash(path)
    tmp = tmp_path / ".in.jsonl.new"
    tmp.write_bytes(json.dumps({"id": "new", "text": "added at the top"}).encode() + b"\n" + JSONL[:2000])
    os.replace(tmp, path)  # a nightly export, replacing the file atomically
    with pytest.raises(DatasetChanged, match=r"in.jsonl line 3 held row 'r0002' at the scan and now holds something else .*rerun"):
        read_slice(cfg, piece)
    path.write_bytes(JSONL[:2000].replace(b"Invoice 2 ", b"Invoice 9 "))  # same ids and byte ranges, one row edited
    with pytest.raises(DatasetChanged, match="line 3 held row 'r0002' at the scan and its content is not what the scan read"):
        read_slice(cfg, piece)
    path.unlink()  # moved away during the run
    with pytest.raises(DatasetChanged, match="is gone, moved or deleted during the run"):
        read_slice(cfg, piece)


def test_parquet_and_text_dir_changes_are_caught_too(tmp_path):
    pq.write_table(pa.Table.from_pylist(ROWS[:5]), tmp_path / "in.parquet")
    cfg = _cfg(tmp_path / "in.parquet", format="parquet")
    index = scan(cfg, tmp_path)
    pq.write_table(pa.Table.from_pylist(ROWS[:2]), tmp_path / "in.parquet")
    with pytest.raises(DatasetChanged, match="no longer holds the rows the scan read"):
        read_slice(cfg, index.slice(index.table.slice(3, 2)))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("first")
    cfg = _cfg(docs, format="text_dir")
    index = scan(cfg, tmp_path)
    (docs / "a.txt").write_text("second")
    with pytest.raises(DatasetChanged, match="docs/a.txt held row 'a' at the scan and its content is not what the scan read"):
        read_slice(cfg, index.slice(index.table))
