"""``python -m fucina_jobs bench reports``: long documents, chunked, against the same text as separate rows.

It builds expense reports from a folder of receipts with gold labels (the
receipts-dev layout: ``inputs.jsonl`` and ``gold.jsonl``): each report joins
``--receipts`` receipts, a blank line between two, into one row of 10-20k
tokens, past the default model's context of 8,192. Nothing is copied into the
project: the reports are written under ``--dir`` (a temporary folder by default).

For each report it runs the report job (``conf/extract_receipt_report.yaml``:
chunking on) twice, one run after the other so both see the same machine: on the
report, one row, and on its receipts as separate rows (a report of one receipt
each: the same prompt, schema and grammar, only the document's length differs).
It prints:

- accuracy: gold receipts, items extracted, items that match a gold receipt (all of
  company, date and total equal under ``eval``'s value matching, each gold receipt
  matched once), recall and precision, and the same on date and total alone;
  items that match a gold receipt another item already matched (duplicates);
- length: rejects for length or a prompt past the context, and the chunk plan of a
  document of ``--scale`` times the context (every chunk's prompt must fit);
- throughput: the documents' tokens (each counted once) per second of the shards'
  wall time, for both arms, and their ratio.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Callable

JOB = "extract_receipt_report"
#: The receipt fields an item is judged on.
FIELDS = ("company", "date", "total")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "reports",
        help="long documents: chunked reports vs the same receipts as rows (accuracy, length, tok/s)",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dev", type=Path, required=True, help="receipts folder: inputs.jsonl ({id, text}) and gold.jsonl ({id, label})")
    p.add_argument("--reports", type=int, default=3, help="reports to build and decode (default 3)")
    p.add_argument("--receipts", default="30-45", help="receipts per report, a range (default 30-45)")
    p.add_argument("--scale", type=int, default=20, help="also plan the chunks of one document of this many contexts (default 20)")
    p.add_argument("--seed", type=int, default=0, help="which receipts go into which report (default 0)")
    p.add_argument("--dir", type=Path, default=None, help="where the reports and the runs go (default: a temporary folder, deleted after)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="a Hydra override for both jobs (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")


@dataclass
class Report:
    id: str
    receipts: list[dict[str, Any]]  # {"id", "text"}
    gold: list[dict[str, Any]]  # their labels, in order

    @property
    def text(self) -> str:
        return "\n\n".join(r["text"] for r in self.receipts)


def build_reports(dev: Path, count: int, sizes: tuple[int, int], seed: int) -> list[Report]:
    """``count`` reports of distinct receipts, each receipt with a full gold label (company, date and total)."""
    texts = {r["id"]: r for r in _jsonl(dev / "inputs.jsonl")}
    labels = {g["id"]: g["label"] for g in _jsonl(dev / "gold.jsonl")}
    usable = sorted(i for i in texts if i in labels and all(labels[i].get(k) is not None for k in FIELDS))
    rng = random.Random(seed)
    rng.shuffle(usable)
    reports, at = [], 0
    for n in range(count):
        size = rng.randint(*sizes)
        ids = usable[at : at + size]
        if len(ids) < size:
            raise SystemExit(f"--dev {dev}: {len(usable)} usable receipts are not enough for {count} reports of {sizes[0]}-{sizes[1]}")
        at += size
        reports.append(Report(f"report-{n}", [{"id": i, "text": texts[i]["text"]} for i in ids], [{k: labels[i][k] for k in FIELDS} for i in ids]))
    return reports


# -- scoring ---------------------------------------------------------------------


def match_items(gold: list[dict[str, Any]], items: list[dict[str, Any]], fields: tuple[str, ...] = FIELDS) -> tuple[int, int]:
    """(items that match a gold receipt not matched yet, items that match only one already matched: duplicates).

    An item matches a gold receipt when every one of ``fields`` matches under ``eval``'s value matching
    (text normalised, dates as dates, numbers within 0.01); items are taken in order, each gold receipt once."""
    from ..eval.scoring import values_match

    free = list(range(len(gold)))
    matched = duplicates = 0
    for item in items:
        hit = next((g for g in free if all(values_match(gold[g][k], item.get(k)) for k in fields)), None)
        if hit is not None:
            free.remove(hit)
            matched += 1
        elif any(all(values_match(g[k], item.get(k)) for k in fields) for g in gold):
            duplicates += 1
    return matched, duplicates


@dataclass
class Arm:
    """One arm's counts over every report."""

    name: str
    _: KW_ONLY
    gold: int = 0
    items: int = 0
    matched: dict[str, int] = field(default_factory=lambda: {"all": 0, "date+total": 0})
    duplicates: dict[str, int] = field(default_factory=lambda: {"all": 0, "date+total": 0})
    rows: int = 0
    rejects: dict[str, int] = field(default_factory=dict)
    doc_tokens: int = 0
    generated: int = 0
    wall_s: float = 0.0
    chunking: dict[str, int] = field(default_factory=dict)

    def add(self, gold: list[dict[str, Any]], items: list[dict[str, Any]]) -> None:
        self.gold += len(gold)
        self.items += len(items)
        for name, fields in (("all", FIELDS), ("date+total", ("date", "total"))):
            matched, duplicates = match_items(gold, items, fields)
            self.matched[name] += matched
            self.duplicates[name] += duplicates

    def figures(self) -> dict[str, Any]:
        rates = {f"recall_{k}": _rate(v, self.gold) for k, v in self.matched.items()} | {
            f"precision_{k}": _rate(v, self.items) for k, v in self.matched.items()
        }
        return {
            "arm": self.name,
            "gold": self.gold,
            "items": self.items,
            "matched": self.matched,
            **rates,
            "duplicates": self.duplicates,
            "rows": self.rows,
            "rejects": self.rejects,
            "doc_tokens": self.doc_tokens,
            "generated_tokens": self.generated,
            "wall_s": round(self.wall_s, 1),
            "doc_tok_s": _rate(self.doc_tokens, self.wall_s),
            "gen_tok_s": _rate(self.generated, self.wall_s),
            "chunking": self.chunking,
        }


def _rate(n: float, total: float) -> float | None:
    return round(n / total, 3) if total else None


# -- runs ------------------------------------------------------------------------


def _run(job: str, data: Path, out: Path, overrides: list[str]) -> tuple[list[dict], list[dict], list[dict]]:
    """Run ``conf/<job>.yaml`` on ``data`` into ``out``; its records, rejects and stats."""
    from ..config import validate
    from ..data import RunDir
    from ..pipeline import Job, compose

    raw = compose(job, [f"dataset.path={data}", f"output.dir={out}", "runtime.replicas=1", *overrides])
    Job(validate(raw), Path.cwd(), raw).run()
    run = RunDir.open(out)
    return run.read("records").to_pylist(), run.read("rejects").to_pylist(), run.read("stats").to_pylist()


def _tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids)


def _arm_run(arm: Arm, records: list[dict], rejects: list[dict], stats: list[dict], items: Callable[[dict], list[dict]]) -> list[dict]:
    arm.rows += len(records) + len(rejects)
    for r in rejects:
        arm.rejects[r["reason"]] = arm.rejects.get(r["reason"], 0) + 1
    arm.generated += sum(s.get("generated_tokens") or 0 for s in stats)
    arm.wall_s += sum(s.get("wall_s") or 0.0 for s in stats)
    for s in stats:
        for k in ("chunked_rows", "chunks", "merge_conflicts", "overlap_duplicates"):
            arm.chunking[k] = arm.chunking.get(k, 0) + (s.get(k) or 0)
    return [item for r in records for item in items(json.loads(r["text"]))]


def run_reports(args: argparse.Namespace) -> dict[str, Any]:
    import os

    import ray

    from ..engines import DEFAULT_MODEL, load_tokenizer

    low, _, high = args.receipts.partition("-")
    reports = build_reports(args.dev, args.reports, (int(low), int(high or low)), args.seed)
    work = Path(tempfile.mkdtemp(prefix="fucina-bench-reports-")) if args.dir is None else args.dir
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        address="local",
        resources={"replica": 1},
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"OMP_WAIT_POLICY": "PASSIVE", "RAY_AUTH_MODE": "disabled"}},
    )
    chunked, rows = Arm("report, chunked"), Arm("receipts as rows")
    per_report = []
    try:
        work.mkdir(parents=True, exist_ok=True)
        for report in reports:
            tokens = _tokens(tokenizer, report.text)
            started = time.perf_counter()
            data = _write(work / report.id / "report.jsonl", [{"id": report.id, "text": report.text}])
            result = _run(JOB, data, work / report.id / "report-out", args.override)
            chunked.doc_tokens += tokens
            found = _arm_run(chunked, *result, items=lambda record: record.get("receipts") or [])
            chunked.add(report.gold, found)
            data = _write(work / report.id / "receipts.jsonl", report.receipts)
            result = _run(
                JOB, data, work / report.id / "receipts-out", [*args.override, "runtime.shard_size=1000"]
            )  # one shard: its wall is the arm's
            rows.doc_tokens += sum(_tokens(tokenizer, r["text"]) for r in report.receipts)
            order = {r["id"]: i for i, r in enumerate(report.receipts)}
            result[0].sort(key=lambda record: order[record["row_id"]])  # items in the report's order
            rows.add(report.gold, _arm_run(rows, *result, items=lambda record: record.get("receipts") or []))
            per_report.append(
                {"report": report.id, "receipts": len(report.receipts), "tokens": tokens, "seconds": round(time.perf_counter() - started)}
            )
            print(f"{report.id}: {len(report.receipts)} receipts, {tokens} tokens, done in {per_report[-1]['seconds']}s", file=sys.stderr, flush=True)
    finally:
        ray.shutdown()
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    a, b = chunked.figures(), rows.figures()
    return {
        "reports": per_report,
        "arms": [a, b],
        "plan": plan(args, tokenizer),
        "ratios": {k: _rate(a[k], b[k]) for k in ("recall_all", "precision_all", "recall_date+total", "precision_date+total")}
        | {"tok_s_rows_over_chunked": _rate(b["doc_tok_s"], a["doc_tok_s"])},
    }


def plan(args: argparse.Namespace, tokenizer: Any) -> dict[str, Any]:
    """The chunks of one document of ``--scale`` contexts (receipts joined until it is that long), as the report job cuts them."""
    from ..engines import encode_chat
    from ..config import read_text_option, validate
    from ..pipeline import Chunker, compose

    cfg = validate(compose(JOB, ["dataset.path=unused", *args.override]))
    system, template = (read_text_option(getattr(cfg.prompt, k), Path.cwd()) for k in ("system", "template"))
    context = 8192  # SmolLM2-135M-Instruct's max_position_embeddings
    parts, total = [], 0
    for row in itertools.cycle(_jsonl(args.dev / "inputs.jsonl")):
        if total >= args.scale * context:
            break
        parts.append(row["text"])
        total += _tokens(tokenizer, row["text"]) + 1
    document = "\n\n".join(parts)
    chunker = Chunker(
        cfg.dataset.chunking,
        tokenizer,
        context=context,
        system=system,
        template=template,
        text_field=cfg.dataset.text_field,
        max_tokens=cfg.decoding.max_tokens,
    )
    chunks = chunker.chunks({"text": document})
    prompts = [len(encode_chat(tokenizer, template.format(text=document[c.start : c.end]), system)) for c in chunks]
    return {
        "document_tokens": _tokens(tokenizer, document),
        "contexts": round(_tokens(tokenizer, document) / context, 1),
        "chunks": len(chunks),
        "longest_prompt": max(prompts),
        "max_tokens": cfg.decoding.max_tokens,
        "context": context,
        "fits": max(prompts) + cfg.decoding.max_tokens <= context,
    }


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def format_reports(result: dict[str, Any]) -> str:
    arms = result["arms"]
    lines = [
        "| arm | gold receipts | items | matched (all 3) | recall | precision | matched (date+total) | recall | precision | duplicates | rejects |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for a in arms:
        lines.append(
            f"| {a['arm']} | {a['gold']} | {a['items']} | {a['matched']['all']} | {a['recall_all']} | {a['precision_all']} | "
            f"{a['matched']['date+total']} | {a['recall_date+total']} | {a['precision_date+total']} | "
            f"{a['duplicates']['all']} ({a['duplicates']['date+total']}) | {a['rejects'] or 0} |"
        )
    lines += [
        "",
        "| arm | rows | document tokens | generated tokens | shard wall s | document tok/s | generated tok/s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for a in arms:
        lines.append(
            f"| {a['arm']} | {a['rows']} | {a['doc_tokens']} | {a['generated_tokens']} | {a['wall_s']} | {a['doc_tok_s']} | {a['gen_tok_s']} |"
        )
    c = arms[0]["chunking"]
    lines += [
        "",
        f"chunked rows {c.get('chunked_rows', 0)}, chunks {c.get('chunks', 0)}, merge conflicts {c.get('merge_conflicts', 0)}, "
        f"overlap duplicates dropped {c.get('overlap_duplicates', 0)}",
        "ratios (chunked / rows): " + ", ".join(f"{k} {v}" for k, v in result["ratios"].items()),
        "plan: " + ", ".join(f"{k} {v}" for k, v in result["plan"].items()),
    ]
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    result = run_reports(args)
    sys.stdout.write(json.dumps(result, indent=2) + "\n" if args.json else format_reports(result))
    return 0
