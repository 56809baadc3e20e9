"""``logitjudge calibrate``: fit a calibration file on labelled data; NLL/AUROC/ECE before and after.

::

    # rows in the shared data row shape: the model is run on them first (uncalibrated)
    logitjudge calibrate ../shared/data/vitaminc/dev.jsonl --out calib.json --report reliability.png
    # our result rows with gold (``logitjudge evaluate --out``), or benchmarks/quality/quality.py JSON files
    logitjudge calibrate results.jsonl quality-smollm2-135m-instruct.json --out calib.json
    # only evaluator scalings, on top of the shipped file's buckets (which stay as they are)
    logitjudge calibrate quality-...-halueval_qa_recall_derived-raw.json --base shipped --out calib.json

What it computes and how: :mod:`logitjudge.rubrics.calibrate`. This module is the command: its flags,
reading the inputs, printing and writing.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from logitjudge.cli.common import add_model_args, add_subcommand, complain, float_between, load_failure, load_judge
from logitjudge.engine.calibration import NONE, SHIPPED, Calibration, shipped_for
from logitjudge.engine.question_types import QUESTION_TYPES
from logitjudge.errors import LogitJudgeError
from logitjudge.rubrics.calibrate import fit_and_report, reliability_plot, split
from logitjudge.rubrics.judgelike import JudgeLike
from logitjudge.rubrics.samples import samples_from_rows

# -- reading labelled inputs -------------------------------------------------------------------


def _read_input(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[dict[str, Any]]]:
    """(result rows, the engine that made them if recorded, data rows still to run)."""
    if path.suffix == ".json":  # benchmarks/quality/quality.py output
        record = json.loads(path.read_text(encoding="utf-8"))
        rows = [r for items in record.get("items", {}).values() for r in items]
        return rows, (record.get("environment") or {}).get("engine"), []
    from logitjudge.rubrics.dataio import read_rows

    rows = read_rows(str(path))
    results = [r for r in rows if isinstance(r.get("results"), dict)]
    data = [r for r in rows if not isinstance(r.get("results"), dict)]
    engine = None
    summary = path.with_name(path.name + ".summary.json")
    if summary.exists():
        engine = (json.loads(summary.read_text(encoding="utf-8")).get("environment") or {}).get("engine")
    return results, engine, data


def _run_data_rows(judge: JudgeLike, rows: list[dict[str, Any]], batch_size: int) -> list[dict[str, Any]]:
    from logitjudge.rubrics.aggregate import gold_of
    from logitjudge.rubrics.api import evaluate

    run = evaluate(judge, rows, "auto", batch_size=batch_size)
    out = []
    for raw, res in zip(rows, run.results, strict=True):
        rec = res.model_dump(mode="json", exclude_none=True)
        rec["id"] = raw.get("id")
        rec["gold"] = gold_of(raw).model_dump(mode="json")
        out.append(rec)
    return out


def _writable(path: str, flag: str, inputs: list[str]) -> str | None:
    """Why ``path`` cannot be written as ``flag``'s file (checked before any work), or None."""
    target = Path(path)
    if target.is_dir():
        return f"{flag} {path} is a directory"
    if not target.parent.is_dir():
        return f"{flag} {path}: the folder {target.parent} does not exist"
    if any(target.resolve() == Path(name).resolve() for name in inputs):
        return f"{flag} {path} is one of the labelled inputs; it would be overwritten"
    return None


SUMMARY = "fit temperature/bias calibration on labelled data; ECE and Brier before/after on a held-out part"
"""The subcommand's line in ``logitjudge --help``."""


def add_calibrate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``calibrate`` subcommand to the main CLI's subparsers."""
    p = add_subcommand(subparsers, "calibrate", SUMMARY, __doc__)
    p.add_argument(
        "labelled",
        nargs="+",
        help="labelled JSONL (shared data rows or our result rows with gold), or benchmarks/quality/quality.py JSON",
    )
    p.add_argument("--out", required=True, help="calibration JSON to write")
    p.add_argument("--report", default=None, help="reliability diagram PNG (held-out part, before/after)")
    p.add_argument(
        "--holdout",
        type=float_between(0.0, 1.0),
        default=0.5,
        help="share of source items held out for the refusal check and the report (default 0.5)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the source-item split and the slices")
    p.add_argument(
        "--types",
        default=None,
        help="comma-separated question types that get engine scalings (noul, choice, score; default all); "
        "a bucket scales every question of its type and option count, evaluators' rubric questions included",
    )
    p.add_argument(
        "--base",
        default=None,
        help="'shipped' or a calibration file fitted for the same engine: keep its engine buckets as they "
        "are and fit only evaluator scalings on top of them (a kept one replaces the base's for that evaluator); "
        "the inputs are still uncalibrated runs",
    )
    p.add_argument("--batch-size", type=int, default=4)
    add_model_args(p)
    p.set_defaults(func=run_calibrate)
    return p


_fail = functools.partial(complain, "calibrate")
"""``_fail(message, status=2)``: the subcommand's one-line error (:func:`complain`)."""


def _f(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def print_report(report: Mapping[str, Any]) -> None:
    """The held-out table (before -> after the fitted scaling, kept or refused), then the
    refusals and flattening warnings."""
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=(
            f"calibration, held-out part: {report['n_holdout']} samples of {report['groups_holdout']} source "
            f"items (fitted on {report['n_fit']} of {report['groups_fit']}); 'after' = with the fitted scaling"
        )
    )
    for col in ("group", "n", "acc", "AUROC", "NLL", "ECE", "ECE floor", "Brier", "scaling"):
        table.add_column(col, justify="left" if col in ("group", "scaling") else "right")
    for section in ("by_bucket", "by_set", "imbalanced"):
        for key, ba in report[section].items():
            b, a = ba["before"], ba["after"]
            status = ", ".join(ba["scalings"]) + (" kept" if ba["kept"] else " refused") if ba["scalings"] else "none"
            table.add_row(
                key,
                str(b["n"]),
                f"{_f(b['accuracy'])} -> {_f(a['accuracy'])}",
                f"{_f(b['auroc'])} -> {_f(a['auroc'])}",
                f"{_f(b['nll'])} -> {_f(a['nll'])}",
                f"{_f(b['ece'])} -> {_f(a['ece'])}",
                _f(ba.get("ece_floor")),
                f"{_f(b['brier'])} -> {_f(a['brier'])}",
                status,
            )
        table.add_section()
    console = Console(file=sys.stdout, width=200)
    console.print(table)
    print(
        "ECE floor: the ECE a perfectly calibrated predictor with the 'after' scores shows on average at "
        "this n (labels drawn from its own probabilities; Roelofs et al. 2022); an ECE near it is as low "
        "as n items can show"
    )
    for key, why in report["refused"].items():
        print(f"refused {key}: {why}")
    for key, why in report["flattening"].items():
        print(f"warning {key}: {why}")


def _check_flags(args: argparse.Namespace) -> tuple[list[str] | None, str | None]:
    """``(types, None)``: the ``--types`` asked for (``None``: all); ``(None, why)``: the flags
    are refused (a calibration asked for, an unwritable output, a report not a PNG, an unknown
    type, ``--types`` with ``--base``)."""
    if getattr(args, "calibration", None) not in (None, SHIPPED, NONE):
        return None, "--calibration makes no sense here: calibration is fitted on raw distributions"
    for flag, path in (("--out", args.out), ("--report", args.report)):
        if path is not None and (why := _writable(path, flag, list(args.labelled))):
            return None, why
    if args.report is not None and Path(args.report).suffix.lower() != ".png":
        return None, f"--report {args.report}: the reliability diagram is a PNG (name it .png)"
    if not args.types:
        return None, None
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    calibrated = [name for name, spec in QUESTION_TYPES.items() if spec.calibrated]
    if unknown := sorted(set(types) - set(calibrated)):
        return None, f"--types: {', '.join(unknown)}: not a question type ({', '.join(calibrated)})"
    if args.base is not None:
        return None, "--types and --base: with a base no engine bucket is fitted"
    return types, None


def run_calibrate(args: argparse.Namespace) -> int:
    """The ``calibrate`` subcommand (see the module docstring)."""
    types, refused = _check_flags(args)
    if refused:
        return _fail(refused)
    rows: list[dict[str, Any]] = []
    engines: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for name in args.labelled:
        try:
            results, engine, data = _read_input(Path(name))
        except (OSError, ValueError, AttributeError, TypeError, KeyError) as exc:
            return _fail(
                f"{name}: not labelled rows nor a benchmarks/quality/quality.py result ({type(exc).__name__}: {exc})"
            )
        rows += results
        pending += data
        if engine:
            engines.append(engine)
    if any(
        isinstance(res, dict) and res.get("x_score_uncalibrated") is not None
        for r in rows
        for res in (r.get("results") or {}).values()
    ):
        return _fail("these results were scored under a calibration (x_score_uncalibrated); fit on uncalibrated runs")
    if any(e.get("calibration") for e in engines):
        return _fail("these distributions were produced under a calibration; fit on uncalibrated runs")
    if not rows and not pending:
        return _fail("the inputs hold no rows")
    fitted_for: dict[str, Any] | None = engines[0] if engines else None
    if pending or fitted_for is None:
        args.calibration = NONE  # fit on the raw distributions, never on the shipped calibration's
        try:
            judge = load_judge(args)
        except LogitJudgeError as exc:
            return _fail(f"{load_failure(exc)}: {exc.message}", 1)
        described = judge.describe()
        if fitted_for is not None and any(fitted_for.get(k) != described.get(k) for k in ("fingerprint", "dtype")):
            return _fail("the result rows come from another model or dtype than --model")
        fitted_for = described
        if pending:
            rows += _run_data_rows(judge, pending, args.batch_size)
    if any(e.get(k) != fitted_for.get(k) for e in engines for k in ("fingerprint", "prompt_version", "dtype")):
        return _fail("the inputs come from different engines (fingerprint, prompt version or dtype differ)")
    first: dict[str, dict[str, Any]] = {}
    for r in rows:  # the same item in two inputs counts once (first wins)
        first.setdefault(str(r.get("id")), r)
    try:
        samples = samples_from_rows(list(first.values()))
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        return _fail(f"malformed result rows ({type(exc).__name__}: {exc}); see logitjudge/rubrics/samples.py")
    if not samples:
        return _fail("no labelled distributions in the input (see logitjudge/rubrics/samples.py)")
    base = None
    if args.base is not None:
        try:
            base = shipped_for(fitted_for) if args.base == SHIPPED else Calibration.load(args.base)
            if base is None:
                said = ", ".join(f"{k} {fitted_for.get(k)!r}" for k in ("model", "dtype", "prompt_version"))
                return _fail(f"--base shipped: no shipped calibration matches these inputs' engine ({said})")
            base.check(fitted_for)
        except LogitJudgeError as exc:
            return _fail(f"--base: {exc.message}")
        print(f"base: {base.origin or args.base} ({base.digest}); its engine buckets are kept as they are")
    meta = {"data": list(args.labelled), **({"types": types} if types else {})}
    cal, report = fit_and_report(
        samples, fitted_for, holdout=args.holdout, seed=args.seed, meta=meta, types=types, base=base
    )
    print_report(report)
    kept_now = [k for k in report["fits"] if k.startswith("evaluator:") and k not in report["refused"]]
    if base is not None and not kept_now:
        why = "reasons above" if report["refused"] else "no probability or rubric evaluator score had enough samples"
        return _fail(f"no evaluator scaling kept on top of the base ({why}); {args.out} not written", 1)
    if not cal.scalings and not cal.evaluators:
        return _fail(
            "no scaling kept: every fit was refused because it did not lower the cross-validated or the "
            f"held-out NLL (reasons above); {args.out} not written",
            1,
        )
    cal.save(args.out)
    for name, s in [*cal.scalings.items(), *((f"evaluator:{k}", v) for k, v in cal.evaluators.items())]:
        bias = "" if s.bias is None else " bias " + ", ".join(f"{b:+.2f}" for b in s.bias)
        print(f"{name}: T={s.temperature:.3f}{bias} (n={s.n}{', clamped' if s.clamped else ''})")
    if args.report:
        _, held = split(samples, args.holdout, args.seed)
        reliability_plot(held, cal, args.report, title=f"{fitted_for.get('model', '')}: held-out reliability")
        print(f"report: {args.report}")
    print(f"calibration: {args.out}")
    return 0
