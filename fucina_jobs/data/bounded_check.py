"""Post-validation that cannot hang: jsonschema, with its regexes through ``regex``, under a time limit per row.

A row's own schema is untrusted, and a relaxed grammar leaves some of it (an
``if`` branch, say) to post-validation alone. A pattern such as ``^(a|aa)+$``
backtracks for hours on a 60-character value, and Python's ``re`` holds the GIL
while it does, so every shard on the replica would stop. Here each regex the
validator applies (``pattern``, ``patternProperties``, and ``additionalProperties``'
look-up of pattern names) runs in the ``regex`` module, with the GIL released and
a timeout, and every keyword checks the row's deadline. A row whose check runs
past ``ROW_CHECK_SECONDS`` raises ``CheckTimeout``, and ``sink.schema_failure``
makes it a reject that says why.

Not covered: ``unevaluatedProperties`` looks pattern names up through jsonschema's
own helper, which uses ``re``.
"""

from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import regex
from jsonschema import ValidationError
from jsonschema.validators import extend

#: Seconds one row's check against its schema may take; far above what any real schema needs (milliseconds).
#: ``regex`` counts its timeout in CPU seconds, so on a loaded machine a stuck pattern takes longer on the clock.
ROW_CHECK_SECONDS = 2.0

_row = threading.local()  # the deadline of the row this thread checks (replicas check shards in threads of their own)


class CheckTimeout(Exception):
    """A row's check ran past its time limit."""


@contextmanager
def time_limit(seconds: float = ROW_CHECK_SECONDS) -> Iterator[None]:
    """Give the checks made in this block (this thread) ``seconds`` in all."""
    _row.deadline = time.monotonic() + seconds
    try:
        yield
    finally:
        _row.deadline = None


def _remaining() -> float | None:
    deadline = getattr(_row, "deadline", None)
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise CheckTimeout(f"the check against the schema ran past its {ROW_CHECK_SECONDS:g}s limit")
    return left


def search(pattern: str, text: str) -> bool:
    """``re.search`` semantics, bounded by the row's deadline."""
    try:
        return regex.search(pattern, text, timeout=_remaining(), concurrent=True) is not None
    except TimeoutError:
        raise CheckTimeout(
            f"the pattern {pattern!r} ran past the {ROW_CHECK_SECONDS:g}s limit on a {len(text)}-character value: "
            "it backtracks catastrophically; rewrite it without nested quantifiers"
        ) from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    extras = [key for key in instance if key not in known and not any(search(p, key) for p in patterns)]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif extra is False and extras:
        names = ", ".join(repr(key) for key in sorted(extras))
        if patterns:
            yield ValidationError(
                f"{names} {'does' if len(extras) == 1 else 'do'} not match any of the regexes: {', '.join(map(repr, sorted(patterns)))}"
            )
        else:
            yield ValidationError(f"Additional properties are not allowed ({names} {'was' if len(extras) == 1 else 'were'} unexpected)")


_REGEX_KEYWORDS = {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties}


def _timed(keyword: Callable[..., Any]) -> Callable[..., Iterator[ValidationError]]:
    """A keyword that first checks the row's deadline: a schema whose plain keywords blow up (nested ``anyOf``) stops too."""

    @functools.wraps(keyword)
    def check(validator: Any, value: Any, instance: Any, schema: dict) -> Iterator[ValidationError]:
        _remaining()
        yield from keyword(validator, value, instance, schema) or ()

    return check


@functools.cache
def bounded(cls: type) -> type:
    """``cls`` (a jsonschema validator class) with every keyword timed and its regex keywords through ``regex``."""
    keywords = {name: _REGEX_KEYWORDS.get(name, fn) for name, fn in cls.VALIDATORS.items()}
    return extend(cls, {name: _timed(fn) for name, fn in keywords.items()})
