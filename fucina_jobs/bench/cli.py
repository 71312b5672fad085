"""``python -m fucina_jobs bench``: the argument parser and the dispatch to each subcommand."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
import textwrap
from pathlib import Path
from typing import Any, get_args

from . import job, occupancy, pipeline, reports
from ..config import DecodingConfig, ModelConfig
from .inputs import DEFAULT_JOB, DEFAULT_SCHEMA, load_docs

log = logging.getLogger("fucina_jobs.bench")


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("stream counts must be positive integers")
    return values


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text}")
    return value


EPILOG = """\
examples:
  python -m fucina_jobs bench decode                     # 8 docs, 3 repeats, 4 arms
  python -m fucina_jobs bench decode --docs 24 --json
  python -m fucina_jobs bench streams --streams 1,2,4,8 --docs 8
  python -m fucina_jobs bench decode --model DIR --dtype float64 --docs 2 --max-tokens 24
  .venv-vllm/bin/python -m fucina_jobs bench engines --streams 8 --docs 8

Tables go to stdout, progress to stderr (-q for warnings only).
"""


def _add_command(sub: Any, common: argparse.ArgumentParser, name: str, help: str, description: str) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        parents=[common],
        help=help,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(description, 78),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fucina_jobs bench",
        description=textwrap.fill(
            "Benchmark the constrained speculative decoder on the shipped invoice job (jobs/invoices, constrained "
            "by schemas/invoice.json), greedy decoding. Arms are measured side by side in one run, alternating, "
            "and wall times are medians over --repeats, so a table stays comparable on a shared, noisy machine.",
            78,
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--max-tokens",
        type=_positive,
        default=DecodingConfig().max_tokens,
        help="generation cap per request (default: a job's decoding.max_tokens, %(default)s)",
    )
    common.add_argument("--json", action="store_true", help="print one JSON object instead of the text tables")
    common.add_argument("--save", type=Path, metavar="FILE", help="also write the JSON object to FILE")
    # The model's defaults and choices are a job's (config.py), so a benchmark measures what a run would load.
    model = ModelConfig.model_fields
    common.add_argument("--model", default=model["source"].default, help=f"model source: {model['source'].description}")
    common.add_argument(
        "--dtype", default=model["dtype"].default, choices=get_args(model["dtype"].annotation), help="model dtype (default %(default)s)"
    )
    common.add_argument(
        "--device", default=model["device"].default, choices=get_args(model["device"].annotation), help="model device (default %(default)s)"
    )
    common.add_argument("--threads", type=_positive, default=2, help="torch intra-op threads (default 2)")
    common.add_argument(
        "--job", type=Path, default=DEFAULT_JOB, help="job directory with inputs.jsonl, system.txt, template.txt (default: jobs/invoices)"
    )
    common.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA, help="JSON schema that constrains the output (default: schemas/invoice.json)")
    common.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the short untimed generation per arm")
    common.add_argument("-q", "--quiet", action="store_true", help="only warnings on stderr")

    sub = parser.add_subparsers(dest="command", required=True, metavar="{decode,streams,engines,pipeline,occupancy,reports,job}")
    decode = _add_command(
        sub,
        common,
        "decode",
        "one stream: plain vs speculative decoding, constraint overhead",
        "One stream, greedy, four arms per document: plain unconstrained, plain constrained, speculative "
        "constrained without grammar drafting (copies of the document and prompt-lookup n-grams), speculative "
        "constrained with grammar drafting (forced tokens first). Each document is constrained as the job "
        "constrains it: by its own grounded grammar where the schema grounds fields. Reports forwards, tokens, tokens/forward, acceptance "
        "per draft source, median wall, wall ratio vs plain constrained, byte identity with plain constrained, "
        "a time split and the logit processor's time per token.",
    )
    decode.add_argument("--docs", type=_positive, default=8, help="first N invoice documents (default 8 of 24)")
    decode.add_argument("--repeats", type=_positive, default=3, help="timed passes over the documents (default 3)")
    streams = _add_command(
        sub,
        common,
        "streams",
        "aggregate throughput of N concurrent streams, speculation off and on",
        "Constrained, greedy decoding of a request set with several stream counts, speculation off and on. "
        "Documents are cycled under distinct ids until there are at least max(--streams) requests. Reports "
        "aggregate committed tokens/s, tokens per forward, mean acceptance and the tok/s ratio against the "
        "first --streams value without speculation.",
    )
    streams.add_argument("--docs", type=_positive, default=8, help="distinct invoice documents to cycle (default 8)")
    streams.add_argument("--streams", type=_int_list, default=[1, 2, 4, 8, 16], help="comma-separated stream counts (default 1,2,4,8,16)")
    streams.add_argument("--repeats", type=_positive, default=1, help="timed passes per arm (default 1)")
    engines = _add_command(
        sub,
        common,
        "engines",
        "fucina vs vLLM vs transformers generate, side by side",
        "The same model, prompts, schema and stream count through: the fucina engine (plain constrained, "
        "speculative with grammar drafting on 1 and on --streams streams), vLLM (structured outputs, and with "
        "n-gram speculation) and transformers generate with an llguidance logits processor. Each engine runs "
        "in a worker process of its own; arms alternate and the table shows medians. Reports tok/s, tokens "
        "per forward, acceptance, % valid outputs and the ratio against vLLM structured + n-gram. The vLLM "
        "arms need the vLLM extra (run with .venv-vllm/bin/python); without it they are left out.",
    )
    engines.add_argument("--docs", type=_positive, default=8, help="first N invoice documents (default 8)")
    engines.add_argument("--streams", type=_positive, default=8, help="concurrent streams for the batched arms (default 8)")
    engines.add_argument("--repeats", type=_positive, default=3, help="timed passes per arm (default 3)")
    engines.add_argument("--vllm-draft", type=_positive, default=4, help="vLLM n-gram speculative tokens (default 4)")
    pipeline.add_parser(sub)
    occupancy.add_parser(sub)
    reports.add_parser(sub)
    job.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module = {"pipeline": pipeline, "occupancy": occupancy, "reports": reports, "job": job}.get(args.command)
    if module is not None:  # a subcommand with its own arguments and output
        return module.main(args)
    args.started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    log.setLevel(logging.WARNING if args.quiet else logging.INFO)
    if args.command == "engines":
        from .engines import format_engines, run_engines

        result, text = run_engines(args, *load_docs(args.job, args.docs)), format_engines
    elif args.command == "decode":
        from .decode import format_decode, run_decode

        result, text = run_decode(args), format_decode
    else:
        from .streams import format_streams, run_streams

        result, text = run_streams(args), format_streams
    if args.save:
        args.save.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text(result))
    return 0
