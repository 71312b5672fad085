"""An llguidance-backed ``LogitProcessor``: JSON schema, Lark or regex.

The grammar is compiled once; ``clone`` hands each stream its own matcher over
the same compiled grammar and tokenizer bridge. The mask is sized to the
*model* vocabulary so padding ids (which have no bytes) stay masked, and the
bridge marks control tokens as special so grammar text can never select them.
When the grammar completes, llguidance allows only the bridge's EOS, which is
set to the configured stop token.
"""

from __future__ import annotations

import ctypes
import functools
import json
import logging
from pathlib import Path
from typing import Any, Callable, Sequence

import llguidance
import llguidance.hf
import numpy as np
import torch

from .. import native
from .processor import LogitProcessor, LookJob, PathsAhead

log = logging.getLogger(__name__)

COMPACT_JSON = {"whitespace_flexible": False}


class GrammarError(ValueError):
    """The grammar does not compile; the message carries llguidance's diagnostic."""


_BRIDGES: dict[tuple[int, int, int], tuple[Any, llguidance.LLTokenizer]] = {}


def tokenizer_bridge(hf_tokenizer: Any, vocab_size: int, stop_token: int) -> llguidance.LLTokenizer:
    """Build (once per tokenizer, vocab size and stop token) the llguidance tokenizer."""
    key = (id(hf_tokenizer), vocab_size, stop_token)
    if key not in _BRIDGES:
        bridge = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab_size, eos_token=stop_token)
        _BRIDGES[key] = (hf_tokenizer, bridge)  # keeping the tokenizer alive pins its id
    return _BRIDGES[key][1]


def read_source(source: str | Path) -> tuple[str, str]:
    """Return (text, name): a ``Path`` is a file to read, a ``str`` the grammar itself."""
    if isinstance(source, Path):
        return source.read_text(encoding="utf-8"), str(source)
    return source, "<inline>"


def read_schema(schema: dict | str | Path | type, name: str | None = None) -> tuple[dict, str]:
    """Return (schema dict, name) from a dict, a pydantic model class, JSON text (a str starting with ``{``) or a file."""
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema(), name or schema.__name__
    if isinstance(schema, dict):
        return schema, name or "<schema>"
    text, source = read_source(schema if isinstance(schema, Path) or schema.lstrip().startswith("{") else Path(schema))
    try:
        return json.loads(text), name or source
    except json.JSONDecodeError as err:
        raise GrammarError(f"{name or source}: not valid JSON: {err}") from err


def apply_bitmask(logits: torch.Tensor, bitmask: np.ndarray) -> None:
    """Set every logit whose bit is clear in llguidance's packed int32 ``bitmask`` to -inf, in place.

    ``logits`` is ``[..., vocab]`` and ``bitmask`` ``[..., (vocab + 31) // 32]``;
    columns past the bitmask's 32 bits per word are masked too. The sampler's
    row, one CPU float32 row, takes one pass of the C++ kernel where the
    kernels are built: no unpack to a bool row, no masked copy (and
    ``llguidance.torch`` would compile itself with ``torch.compile`` at its
    first call); ``microbench/mask_apply.py`` times the ways side by side.
    Other rows take numpy's unpack, on numpy or on the row's device.
    """
    one_row = logits.is_cpu and logits.dtype == torch.float32 and logits.dim() == 1 and logits.is_contiguous()
    if one_row and bitmask.flags.c_contiguous and (kernel := _apply_bitmask_kernel()) is not None:
        return kernel(logits.data_ptr(), logits.numel(), bitmask.ctypes.data, bitmask.size)
    covered = min(logits.shape[-1], 32 * bitmask.shape[-1])
    banned = np.unpackbits((~bitmask).view(np.uint8), axis=-1, count=covered, bitorder="little").view(bool)
    if logits.is_cpu and logits.dtype != torch.bfloat16:  # numpy has no bfloat16
        np.copyto(logits.numpy()[..., :covered], -np.inf, where=banned)
    else:
        logits[..., :covered].masked_fill_(torch.from_numpy(banned).to(logits.device), float("-inf"))
    if covered < logits.shape[-1]:
        logits[..., covered:] = float("-inf")


def _apply_bitmasks(rows: list[tuple["Constraint", torch.Tensor, int]], bitmask: np.ndarray) -> None:
    """Mask each ``(constraint, row, index)``'s row by ``bitmask[index]`` as ``process`` does: one C++ call for
    all the CPU float32 rows of one vocabulary size where the kernels are built, else row by row."""
    kernel = _apply_bitmasks_kernel()
    if kernel is not None and rows and all(r.is_cpu and r.dtype == torch.float32 and r.is_contiguous() for _, r, _ in rows):
        for vocab, width in {(c.vocab_size, r.numel()) for c, r, _ in rows}:
            group = [(r, i) for c, r, i in rows if (c.vocab_size, r.numel()) == (vocab, width)]
            pointers = (ctypes.c_void_p * len(group))(*[r.data_ptr() for r, _ in group])
            masks = (ctypes.c_void_p * len(group))(*[bitmask[i].ctypes.data for _, i in group])
            kernel(pointers, masks, len(group), vocab, width, bitmask.shape[1], torch.get_num_threads())
        return
    for c, row, i in rows:
        c._mask(row, bitmask[i], None)


@functools.cache
def _apply_bitmasks_kernel() -> Callable[..., None] | None:
    if native.library() is None:
        return None
    return native.entry(
        "fucina_apply_bitmasks", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
    )


@functools.cache
def _executor() -> llguidance.LLExecutor:
    """llguidance's thread pool for a batch's masks (80% of the host's cores, at most 32)."""
    return llguidance.LLExecutor()


@functools.cache
def _apply_bitmask_kernel() -> Callable[[int, int, int, int], None] | None:
    if native.library() is None:
        return None
    return native.entry("fucina_apply_bitmask", [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64])


def only_allowed(bitmask: np.ndarray) -> int | None:
    """The token when llguidance's packed ``bitmask`` allows exactly one, else None (about a microsecond)."""
    if np.count_nonzero(bitmask) != 1:
        return None
    words = bitmask.view(np.uint32)
    index = int(words.argmax())  # the one nonzero word
    word = int(words[index])
    return None if word & (word - 1) else index * 32 + word.bit_length() - 1


#: llguidance's limits, but for the lexer's fuel at compile time: ten times its default of 1,000,000. Why ten times: a
#: grounded grammar over a long document (tens of thousands of characters) needs a few million to precompute its spans'
#: lexemes, and its matcher fails at the default ("lexer precomputation failed"); with the headroom it compiles as fast
#: as before (``docs/LONG_DOCUMENTS.md`` has the measurement). Computing those lexemes lazily instead fails later,
#: mid-decode ("too many expressions").
LIMITS = llguidance.LLParserLimits(initial_lexer_fuel=10_000_000)


class Constraint(LogitProcessor):
    has_structure = True

    def __init__(
        self,
        grammar: str,
        tokenizer: Any,
        *,
        name: str = "<grammar>",
        vocab_size: int | None = None,
        stop_token: int | None = None,
    ):
        """Compile ``grammar`` (llguidance's grammar JSON or Lark) for ``tokenizer``.

        ``vocab_size`` is the model's logits width (defaults to the tokenizer's);
        ``stop_token`` is what a completed grammar forces (defaults to EOS).
        """
        self.name = name
        self.vocab_size = vocab_size or len(tokenizer)
        self.stop_token = tokenizer.eos_token_id if stop_token is None else stop_token
        self.bridge = tokenizer_bridge(tokenizer, self.vocab_size, self.stop_token)
        diagnostic = llguidance.LLMatcher.validate_grammar(grammar, self.bridge, limits=LIMITS)
        if diagnostic:
            raise GrammarError(f"{name}: {diagnostic}")
        self.grammar = grammar
        self._matcher = llguidance.LLMatcher(self.bridge, grammar, log_level=0, limits=LIMITS)
        if self._matcher.is_error():
            raise GrammarError(f"{name}: {self._matcher.get_error()}")
        self._initial = self._matcher.deep_copy()  # never advanced: reset() restores failed matchers from it
        self._init_buffers()

    def _init_buffers(self) -> None:
        self._bitmask = np.zeros((self.vocab_size + 31) // 32, dtype=np.int32)
        self._bitmask_ptr = self._bitmask.ctypes.data  # a microsecond a token to ask numpy again
        self.errors = 0

    # -- construction -------------------------------------------------------

    @classmethod
    def json_schema(cls, schema: dict | str | Path | type, tokenizer: Any, *, whitespace_flexible: bool = False, **kw) -> "Constraint":
        """From a schema dict, a JSON file or text, or a pydantic model class."""
        schema, name = read_schema(schema, kw.pop("name", None))
        options = {"whitespace_flexible": whitespace_flexible}
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=options)
        except ValueError as err:
            raise GrammarError(f"{name}: {err}") from err
        return cls(grammar, tokenizer, name=name, **kw)

    @classmethod
    def lark(cls, source: str | Path, tokenizer: Any, **kw) -> "Constraint":
        text, name = read_source(source)
        return cls(llguidance.LLMatcher.grammar_from_lark(text), tokenizer, name=kw.pop("name", name), **kw)

    @classmethod
    def regex(cls, source: str | Path, tokenizer: Any, **kw) -> "Constraint":
        text, name = read_source(source)
        return cls(llguidance.LLMatcher.grammar_from_regex(text.strip()), tokenizer, name=kw.pop("name", name), **kw)

    def clone(self) -> "Constraint":
        """Independent matcher state over the shared compiled grammar and bridge."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._matcher = self._matcher.deep_copy()
        twin._init_buffers()
        return twin

    # -- the seam -----------------------------------------------------------

    def process(self, logits: torch.Tensor, history: Sequence[int]) -> int | None:
        self._fill_bitmask()
        return self._mask(logits, self._bitmask, only_allowed(self._bitmask))

    @classmethod
    def look_paths(cls, jobs: Sequence[LookJob]) -> PathsAhead:
        """Every job's masks in one llguidance call, before the rows exist; the rows are masked in ``process``.

        ``fill_next_token_bitmask_par_with_draft_tokens`` advances a matcher
        along its path on llguidance's threads (the host's cores), writes a
        mask per step and rolls the matcher back; it stops at the end of a
        path's valid tokens or of the grammar, where a job's processed rows
        end (unfilled masks are all zero, which no healthy matcher gives). A
        mask that allows one token names it. A failed matcher's rows are left
        to ``process``, which logs it.
        """
        bitmask = np.zeros((sum(n for *_, n in jobs), jobs[0][0]._bitmask.size), dtype=np.int32)
        starts = np.cumsum([0] + [n for *_, n in jobs])
        live = [(c._matcher, int(start), list(path)) for (c, _, path, _), start in zip(jobs, starts) if not c._matcher.is_error()]
        executor, size = _executor(), bitmask.shape[1] * 4
        if steps := [(m, k) for m, k, path in live if not path]:  # llguidance refuses an empty path
            executor.unsafe_compute_mask_ptr(steps, bitmask.ctypes.data, size, len(bitmask))
        if paths := [job for job in live if job[2]]:
            executor.unsafe_compute_mask_ptr_with_draft_token(paths, bitmask.ctypes.data, size, len(bitmask))
        return _Masks(jobs, bitmask, starts)

    def _mask(self, logits: torch.Tensor, bitmask: np.ndarray, forced: int | None) -> int | None:
        """``process``'s work on the row, once the mask is filled: name the one allowed token, or mask the row."""
        if forced is None:
            apply_bitmask(logits[: self.vocab_size], bitmask)
            if len(logits) > self.vocab_size:
                logits[self.vocab_size :] = float("-inf")
        return forced

    def _fill_bitmask(self) -> None:
        if not self._matcher.is_error():
            self._matcher.unsafe_compute_mask_ptr(self._bitmask_ptr, self._bitmask.nbytes)
        if self._matcher.is_error():
            # Degrade to a clean stop rather than hang or sample garbage.
            self._note_error()
            self._bitmask[:] = 0
            self._bitmask.view(np.uint32)[self.stop_token >> 5] = 1 << (self.stop_token & 31)

    def allows(self, token: int) -> bool:
        """Is ``token`` in the mask now? The same llguidance mask ``process`` applies, read for one token:
        a conformance walk judges thousands of instances and needs no logits row."""
        if not self._matcher.is_error():
            self._matcher.unsafe_compute_mask_ptr(self._bitmask_ptr, self._bitmask.nbytes)
        if self._matcher.is_error():
            return token == self.stop_token  # as process: a failed matcher allows only the stop token
        return bool(self._bitmask[token >> 5] >> (token & 31) & 1)

    def _note_error(self) -> None:
        self.errors += 1
        log.warning("constraint %s: matcher error, forcing the stop token: %s", self.name, self._matcher.get_error())

    def commit(self, token: int) -> None:
        if not self._matcher.is_error() and not self._matcher.is_stopped():
            self._matcher.consume_token(token)

    def reset(self) -> None:
        if self._matcher.is_error():
            # llguidance keeps a failed matcher failed, even across reset().
            self._matcher = self._initial.deep_copy()
        else:
            self._matcher.reset()

    def error(self) -> str | None:
        return self._matcher.get_error() if self._matcher.is_error() else None

    def forced_tokens(self) -> list[int]:
        if self._matcher.is_error() or self._matcher.is_stopped():
            return []
        return list(self._matcher.compute_ff_tokens())

    def likely_tokens(self) -> list[int]:
        """The forced bytes, tokenized: llguidance's forced tokens stop before a token the next free
        choice could merge with (``":"`` before a string value, which ``":"H`` might begin)."""
        forced = self.forced_tokens()
        if self._matcher.is_error() or self._matcher.is_stopped():
            return forced
        spelled = self.bridge.tokenize_bytes(self._matcher.compute_ff_bytes())
        return spelled if spelled[: len(forced)] == forced and len(spelled) > len(forced) else forced

    def valid_prefix_len(self, tokens: Sequence[int]) -> int:
        if self._matcher.is_error():
            return 0
        return self._matcher.validate_tokens(list(tokens))

    # -- state for tests and stats ------------------------------------------

    @property
    def is_complete(self) -> bool:
        return self._matcher.is_stopped() or self._matcher.is_accepting()

    @property
    def is_error(self) -> bool:
        return self._matcher.is_error()


class _Masks(PathsAhead):
    """``Constraint.look_paths``'s masks: each job's rows up to its first unfilled mask are processed; those
    whose mask allows one token are named, the others masked in one pass once the forward computed them."""

    def __init__(self, jobs: Sequence[LookJob], bitmask: np.ndarray, starts: np.ndarray):
        super().__init__(jobs)
        self.bitmask, self.starts = bitmask, starts
        filled = np.count_nonzero(bitmask, axis=1)
        for (c, _, _, n), start, named in zip(jobs, starts, self.named):
            if c._matcher.is_error():
                continue
            for i in range(start, start + n):
                if not filled[i]:
                    break
                named.append(only_allowed(bitmask[i]) if filled[i] == 1 else None)

    def process(self, rows: Sequence[Sequence[torch.Tensor | None]]) -> list[list[int | None]]:
        masked = [
            (c, r[i], start + i)
            for (c, *_), r, start, named in zip(self.jobs, rows, self.starts, self.named)
            for i, t in enumerate(named)
            if t is None and r[i] is not None  # a processor layered over this one may have named a row it would mask
        ]
        _apply_bitmasks(masked, self.bitmask)
        return self.named
