"""Data in and out: the datasets a job reads, the records and rejects it writes, the run folder, storage.

``dataset`` scans a job's inputs into an index and reads rows back (``dataset_files``: the file
formats; ``documents``: PDF, Word and HTML files as text); ``sink`` validates completions into
record and reject tables (``bounded_check``: a schema's patterns under a time limit); ``rundir`` is
the output layout (versions, run partitions, the manifest, the lock, committed shards); ``storage``
writes and reads local paths and ``pyarrow.fs`` URIs atomically.

The other layers (the run in ``pipeline``, ``eval``, ``review``, ``learning``'s command, ``bench``)
import these names from here, never one of the modules (``tests/test_layers.py``).
"""

from .dataset import Row, Slice, check_output_outside, failed_rows, read_rows, read_slice, scan
from .documents import read as read_document
from .rundir import Committed, RunDir, shard_key
from .s3_retries import RetryTally, retries
from .sink import META_FIELDS, Outcome, Validator, json_schema_fields, json_validator, outcome_tables, record_schema, schema_failure
from .storage import Storage, atomic, write_json

__all__ = [
    "META_FIELDS",
    "Committed",
    "Outcome",
    "Row",
    "RetryTally",
    "RunDir",
    "Slice",
    "Storage",
    "Validator",
    "atomic",
    "check_output_outside",
    "failed_rows",
    "json_schema_fields",
    "json_validator",
    "outcome_tables",
    "read_document",
    "read_rows",
    "read_slice",
    "record_schema",
    "retries",
    "scan",
    "schema_failure",
    "shard_key",
    "write_json",
]
