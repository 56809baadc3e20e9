"""``logitjudge evaluate``: run evaluators over a dataset file, resumably, and summarise.

::

    logitjudge evaluate DATA.jsonl --evaluators RAG --out results.jsonl [--report report.html]
    # auto: each row's own evaluator (the labelled data sets name theirs)
    logitjudge evaluate ../shared/data/vitaminc/dev.jsonl --out vc.jsonl --limit 20

- Rows: our field names (``input``, ``output``, ``expected``, ``context``) or RAGAS names
  (``question``, ``answer``, ``contexts``, ``ground_truth``); JSONL, CSV, or Parquet (pandas).
- ``--evaluators``: comma-separated evaluator and suite names, or ``auto`` (the default): each
  row's own ``evaluator`` field, as in the labelled data sets (their typed-question rows run
  ``typed_question``).
- Results: one JSON line per item as it finishes (see :mod:`logitjudge.rubrics.dataio`);
  re-running with the same ``--out`` skips the ids already there.
- Summary: printed as a table and written as JSON (``--summary``, default ``<out>.summary.json``)
  with the command, configuration, environment, timing and per-evaluator metric records.
- ``--report``: a self-contained HTML report with score histograms and reliability diagrams.

Exit status: 0 done (rows may still hold per-item errors, counted in the summary), 2 bad
arguments or data, 1 the model could not be loaded.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from logitjudge.errors import LogitJudgeError, RequestError
from logitjudge.rubrics.aggregate import gold_of, summarize
from logitjudge.rubrics.api import AUTO, selection_for, to_item
from logitjudge.rubrics.dataio import DataError, ResultsWriter, read_rows, row_id
from logitjudge.rubrics.registry import default_registry
from logitjudge.rubrics.results import EvaluatorSummary
from logitjudge.rubrics.runner import DEFAULT_MODEL, ItemPlan, check_thresholds, plan_item, run_plans

__all__ = ["add_evaluate_parser", "run_evaluate", "main"]

TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mean_score", "mean"),
    ("pass_rate", "pass"),
    ("precision", "P"),
    ("recall", "R"),
    ("f1", "F1"),
    ("accuracy", "acc"),
    ("auroc", "AUROC"),
    ("length_baseline_auroc", "len AUROC"),
    ("pairwise_accuracy", "pairwise"),
    ("length_baseline_pairwise_accuracy", "len pairwise"),
    ("chunk_accuracy", "chunk acc"),
    ("chunk_macro_f1", "chunk F1"),
)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    try:
        from logitjudge.cli import add_model_args
    except ImportError:  # pragma: no cover - the main CLI ships with the package
        p.add_argument("--model", default=None)
        p.add_argument("--device", default="auto")
        p.add_argument("--dtype", default="auto")
        p.add_argument("--strategy", default="auto")
    else:
        add_model_args(p)


def add_evaluate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``evaluate`` subcommand to the main CLI's subparsers."""
    p = subparsers.add_parser(
        "evaluate",
        help="run evaluators over a dataset (JSONL/CSV/Parquet), resumably; summary table, JSON, HTML",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("data", help="dataset file: .jsonl, .csv or .parquet")
    p.add_argument(
        "--evaluators",
        default=AUTO,
        help="comma-separated evaluators and suites (RAG, Correctness, Everything), or auto (default): "
        "each row's own `evaluator` field",
    )
    p.add_argument("--out", required=True, help="results JSONL (appended; re-running resumes)")
    p.add_argument("--summary", default=None, help="summary JSON path (default: <out>.summary.json)")
    p.add_argument("--report", default=None, help="write a self-contained HTML report here")
    p.add_argument("--limit", type=int, default=None, help="use only the first N rows of the file")
    p.add_argument("--batch-size", type=int, default=4, help="items per engine call (default 4)")
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override an evaluator's pass threshold (repeatable)",
    )
    p.add_argument(
        "--positive",
        choices=("passed", "failed"),
        default="passed",
        help="positive class for precision/recall against gold labels",
    )
    p.add_argument("--request-model", default=DEFAULT_MODEL, help="the `model` name sent in each request")
    p.add_argument(
        "--judge-factory",
        default=None,
        metavar="MODULE:CALLABLE",
        help="build the judge with this callable instead of loading --model (custom engines, tests)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_model_args(p)
    p.set_defaults(func=run_evaluate)
    return p


def _fail(message: str, status: int = 2) -> int:
    print(f"logitjudge evaluate: {message}", file=sys.stderr)
    return status


def _parse_thresholds(values: Sequence[str]) -> dict[str, float]:
    out = {}
    for v in values:
        name, sep, num = v.partition("=")
        if not sep:
            raise ValueError(f"--threshold {v!r}: expected NAME=VALUE")
        out[name.strip()] = float(num)
    return out


def _load_judge(args: argparse.Namespace) -> Any:
    if args.judge_factory:
        module, _, attr = args.judge_factory.partition(":")
        return getattr(importlib.import_module(module), attr or "make_judge")()
    from logitjudge.judge import Judge

    return Judge.load(args.model, device=args.device, dtype=args.dtype, strategy=args.strategy,
                      calibration=getattr(args, "calibration", None))


def _environment(judge: Any) -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for mod in ("logitjudge", "torch", "transformers", "numpy", "sklearn", "pydantic"):
        if mod in sys.modules:
            env[mod] = getattr(sys.modules[mod], "__version__", "?")
    try:
        env["engine"] = json.loads(json.dumps(judge.describe(), default=str))
    except Exception:  # describe is informative only
        env["engine"] = None
    return env


def _text_len(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, list):
        return sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in value)
    return len(value) if isinstance(value, str) else len(json.dumps(value))


def _progress(total: int, initial: int, disable: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        unit="item",
        dynamic_ncols=True,
        disable=disable,
        desc="evaluate",
        file=sys.stderr,
    )


def print_table(summary: dict[str, EvaluatorSummary]) -> None:
    """The summary as a fixed table (rich), one row per evaluator."""
    from rich.console import Console
    from rich.table import Table

    shown = [
        (key, title)
        for key, title in TABLE_COLUMNS
        if any(s.value(key) is not None for s in summary.values())
    ]
    table = Table(title="logitjudge evaluate: summary")
    for col in ("evaluator", "n", "skipped", "errors", *(t for _, t in shown)):
        table.add_column(col, justify="left" if col == "evaluator" else "right")
    for name, s in summary.items():
        cells = [name, str(s.n), str(s.skipped), str(s.errors)]
        cells += ["–" if s.value(key) is None else f"{s.value(key):.3f}" for key, _ in shown]
        table.add_row(*cells)
    Console(file=sys.stdout, width=200).print(table)
    for name, s in summary.items():
        extra = [
            m
            for m in s.metrics
            if m.name.startswith(("accuracy_", "mae_", "gold_unknown")) and m.value is not None
        ]
        if name == "typed_question" and extra:
            print("typed_question: " + ", ".join(f"{m.name}={m.value:.3f} (n={m.n})" for m in extra))


def run_evaluate(args: argparse.Namespace) -> int:
    """The ``evaluate`` subcommand (see the module docstring)."""
    registry = default_registry()
    names = [n.strip() for n in args.evaluators.split(",") if n.strip()]
    try:
        thresholds = check_thresholds(registry, _parse_thresholds(args.threshold))
        fixed = None if names == [AUTO] else registry.select(names)
        rows = read_rows(args.data, limit=args.limit)
    except (ValueError, RequestError) as exc:
        return _fail(str(exc))
    ids = [row_id(r, i) for i, r in enumerate(rows)]
    seen: set[str] = set()
    dupes = [i for i in ids if i in seen or seen.add(i)]  # type: ignore[func-returns-value]
    if dupes:
        return _fail(
            f"{args.data}: duplicate ids (resuming needs unique ids): {', '.join(sorted(set(dupes))[:5])}"
        )
    out = Path(args.out)
    summary_path = Path(args.summary) if args.summary else out.with_name(out.name + ".summary.json")
    try:
        writer = ResultsWriter(out)
    except DataError as exc:
        return _fail(str(exc))
    done_before = len([i for i in ids if i in writer.done])
    if writer.dropped_partial:
        print(
            f"logitjudge evaluate: dropped a partial last line ({writer.dropped_partial} bytes) of {out}",
            file=sys.stderr,
        )

    # Plan every remaining row first: a row that cannot be planned becomes an error row.
    pending: list[tuple[str, dict[str, Any], ItemPlan]] = []
    invalid = 0
    for rid, raw in zip(ids, rows, strict=True):
        if rid in writer.done:
            continue
        try:
            item = to_item({**raw, "id": rid})
            plan = plan_item(item, fixed or selection_for(registry, AUTO, item), strict=False)
        except RequestError as exc:
            writer.write(
                {"id": rid, "results": {}, "passed": None, "error": f"{type(exc).__name__}: {exc.message}"}
            )
            invalid += 1
            continue
        pending.append((rid, raw, plan))

    judge = None
    started = time.monotonic()
    if pending:
        try:
            judge = _load_judge(args)
        except LogitJudgeError as exc:
            writer.close()
            return _fail(f"cannot load the model: {exc.message}", 1)
        bar = _progress(len(rows), len(rows) - len(pending), args.no_progress)
        try:
            results = run_plans(
                judge,
                (p for _, _, p in pending),
                model=args.request_model,
                thresholds=thresholds,
                batch_size=args.batch_size,
                registry=registry,
            )
            for (rid, raw, _), res in zip(pending, results, strict=True):
                record = res.model_dump(mode="json", exclude_none=True)
                record["id"] = rid
                if isinstance(raw.get("evaluator"), str):
                    record["evaluator"] = raw["evaluator"]
                gold = gold_of(raw)
                if not gold.is_empty():
                    record["gold"] = gold.model_dump(mode="json")
                record["x_lengths"] = {
                    k: n for k in ("output", "context") if (n := _text_len(res_field(raw, k))) is not None
                }
                writer.write(record)
                bar.update(1)
        except LogitJudgeError as exc:  # e.g. an unknown --request-model: nothing can run
            bar.close()
            writer.close()
            return _fail(f"{type(exc).__name__}: {exc.message}")
        bar.close()
    elapsed = time.monotonic() - started
    writer.close()

    wanted = set(ids)
    all_rows = [r for r in ResultsWriter(out).rows() if str(r.get("id")) in wanted]
    summary = summarize(all_rows, positive=args.positive)
    print_table(summary)
    record = {
        "command": " ".join(["logitjudge", "evaluate", *sys.argv[2:]])
        if sys.argv[1:2] == ["evaluate"]
        else " ".join(sys.argv),
        "data": str(args.data),
        "out": str(out),
        "config": {
            "evaluators": names,
            "model": args.model,
            "request_model": args.request_model,
            "batch_size": args.batch_size,
            "thresholds": thresholds,
            "positive": args.positive,
            "limit": args.limit,
        },
        "environment": _environment(judge) if judge is not None else None,
        "run": {
            "rows": len(rows),
            "done_before": done_before,
            "ran": len(pending),
            "invalid_rows": invalid,
            "elapsed_s": round(elapsed, 3),
            "items_per_s": round(len(pending) / elapsed, 3) if pending and elapsed > 0 else None,
        },
        "summary": {k: v.model_dump(mode="json") for k, v in summary.items()},
    }
    summary_path.write_text(
        json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8"
    )
    print(f"results: {out} ({len(all_rows)} rows)   summary: {summary_path}")
    if args.report:
        from logitjudge.rubrics.report import build_report

        meta = {
            "data": args.data,
            "results": out,
            "evaluators": ",".join(names),
            "model": args.model or "default",
            "rows": len(all_rows),
        }
        Path(args.report).write_text(
            build_report(summary, all_rows, title=f"logitjudge evaluate: {Path(args.data).name}", meta=meta),
            encoding="utf-8",
        )
        print(f"report: {args.report}")
    return 0


def res_field(raw: dict[str, Any], key: str) -> Any:
    """A data field of a raw row under our name or its RAGAS name (for length baselines)."""
    from logitjudge.rubrics.items import normalize_row

    return normalize_row(raw).get(key)


def main(argv: list[str] | None = None) -> int:
    """``python -m logitjudge.rubrics.cli DATA ...``: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="logitjudge")
    sub = parser.add_subparsers(dest="command", required=True)
    add_evaluate_parser(sub)
    args = parser.parse_args(["evaluate", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
