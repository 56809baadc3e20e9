"""``logitjudge calibrate``: fit a calibration file on labelled data; ECE/Brier before and after.

::

    # rows in the shared data row shape: the model is run on them first (uncalibrated)
    logitjudge calibrate ../shared/data/vitaminc/dev.jsonl --out calib.json --report reliability.png
    # our result rows with gold (``logitjudge evaluate --out``), or benchmarks/quality.py JSON files
    logitjudge calibrate results.jsonl quality-smollm2-135m-instruct.json --out calib.json

Steps: read every labelled distribution (:mod:`logitjudge.rubrics.samples`); split the *items*
(not chunks) by a hash of their id into a fitting part and a held-out part (``--holdout``,
default 0.5); fit per bucket on the fitting part (:func:`logitjudge.engine.calibration.fit`);
report n, accuracy, NLL, Brier and ECE (10 bins) on the held-out part before and after, per
bucket and per data set x evaluator; draw reliability diagrams (``--report``, PNG).

What the file is fitted for comes from the engine that produced the distributions: the quality
JSON's or the results' ``.summary.json`` ``environment.engine``, else the model loaded from the
model flags. Distributions produced under a calibration are refused (fit on raw ones).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from logitjudge.engine.calibration import Calibration, LabelledDistribution, bucket_of, fit
from logitjudge.errors import LogitJudgeError
from logitjudge.rubrics.samples import Sample, sample_metrics, samples_from_rows

__all__ = ["add_calibrate_parser", "run_calibrate", "split", "fit_and_report", "reliability_plot"]


def in_holdout(item_id: str, fraction: float, seed: int = 0) -> bool:
    """Deterministic split of items: sha256 of ``seed:id`` mapped to [0, 1) below ``fraction``."""
    h = int(hashlib.sha256(f"{seed}:{item_id}".encode()).hexdigest()[:8], 16)
    return h / 16**8 < fraction


def split(samples: Sequence[Sample], fraction: float, seed: int = 0) -> tuple[list[Sample], list[Sample]]:
    """(fitting part, held-out part); all samples of one item fall on the same side."""
    fit_part, held = [], []
    for s in samples:
        (held if in_holdout(s.id, fraction, seed) else fit_part).append(s)
    return fit_part, held


def _set_of(item_id: str) -> str:
    return item_id.split(":", 1)[0] if ":" in item_id else "-"


def _as_fit(samples: Sequence[Sample]) -> list[LabelledDistribution]:
    return [LabelledDistribution(s.type, s.probs, s.gold) for s in samples]


def _calibrated(cal: Calibration, samples: Sequence[Sample]) -> list[Sample]:
    return [Sample(s.id, s.source, s.type, tuple(cal.apply(s.type, s.probs)), s.gold) for s in samples]


def _compare(groups: Mapping[str, list[Sample]], cal: Calibration) -> dict[str, dict[str, Any]]:
    out = {}
    for key, group in groups.items():
        out[key] = {"before": sample_metrics(group), "after": sample_metrics(_calibrated(cal, group))}
    return out


def fit_and_report(
    samples: Sequence[Sample],
    fitted_for: Mapping[str, Any],
    *,
    holdout: float = 0.5,
    seed: int = 0,
    meta: Mapping[str, Any] | None = None,
) -> tuple[Calibration, dict[str, Any]]:
    """Fit on the fitting part; report before/after on the held-out part.

    Returns:
        The calibration (its ``meta.report`` holds the report) and the report: ``by_bucket`` and
        ``by_set`` (``"<set> <evaluator> <bucket>"``) -> ``{"before": metrics, "after": metrics}``.
    """
    fit_part, held = split(samples, holdout, seed)
    cal = fit(_as_fit(fit_part), fitted_for)
    by_bucket: dict[str, list[Sample]] = defaultdict(list)
    by_set: dict[str, list[Sample]] = defaultdict(list)
    for s in held:
        b = bucket_of(s.type, len(s.probs))
        by_bucket[b].append(s)
        by_set[f"{_set_of(s.id)} {s.source} {b}"].append(s)
    report = {
        "holdout": holdout,
        "seed": seed,
        "n_fit": len(fit_part),
        "n_holdout": len(held),
        "by_bucket": _compare(dict(sorted(by_bucket.items())), cal),
        "by_set": _compare(dict(sorted(by_set.items())), cal),
    }
    cal = Calibration(cal.fitted_for, cal.scalings, {**cal.meta, **(meta or {}), "report": report})
    return cal, report


def reliability_plot(
    samples: Sequence[Sample], cal: Calibration, path: str | Path, *, title: str = ""
) -> None:
    """Reliability diagrams of held-out samples, one panel per bucket: before vs after.

    Two options: P(option 0) against its frequency; more: top-label confidence against accuracy.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from logitjudge.rubrics.aggregate import reliability_bins

    buckets: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        buckets[bucket_of(s.type, len(s.probs))].append(s)
    names = sorted(buckets)
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(4 * max(1, len(names)), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        for label, group, style in (
            ("before", buckets[name], "o-"),
            ("after", _calibrated(cal, buckets[name]), "s-"),
        ):
            if len(group[0].probs) == 2:
                conf = [s.probs[0] for s in group]
                truth = [s.gold == 0 for s in group]
            else:
                conf = [max(s.probs) for s in group]
                truth = [max(range(len(s.probs)), key=s.probs.__getitem__) == s.gold for s in group]
            bins = reliability_bins(conf, truth)
            ece = sample_metrics(group)["ece"]
            ax.plot(
                [b["mean_score"] for b in bins],
                [b["frac_true"] for b in bins],
                style,
                label=f"{label} (ECE {ece:.3f})",
            )
        ax.plot([0, 1], [0, 1], "k:", lw=1)
        ax.set(
            xlim=(0, 1),
            ylim=(0, 1),
            title=f"{name} (n={len(buckets[name])} held out)",
            xlabel="predicted probability" if name.endswith(":2") else "top-label confidence",
            ylabel="observed frequency",
        )
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(title or "reliability on the held-out part")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- reading labelled inputs -------------------------------------------------------------------


def _read_input(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[dict[str, Any]]]:
    """(result rows, the engine that made them if recorded, data rows still to run)."""
    if path.suffix == ".json":  # benchmarks/quality.py output
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


def _run_data_rows(judge: Any, rows: list[dict[str, Any]], batch_size: int) -> list[dict[str, Any]]:
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


def add_calibrate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``calibrate`` subcommand to the main CLI's subparsers."""
    from logitjudge.cli import add_model_args

    p = subparsers.add_parser(
        "calibrate",
        help="fit temperature/bias calibration on labelled data; ECE and Brier before/after on a held-out part",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "labelled",
        nargs="+",
        help="labelled JSONL (shared data rows or our result rows with gold), or benchmarks/quality.py JSON",
    )
    p.add_argument("--out", required=True, help="calibration JSON to write")
    p.add_argument("--report", default=None, help="reliability diagram PNG (held-out part, before/after)")
    p.add_argument(
        "--holdout", type=float, default=0.5, help="share of items held out for the report (default 0.5)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the item split")
    p.add_argument("--batch-size", type=int, default=4)
    add_model_args(p)
    p.set_defaults(func=run_calibrate)
    return p


def _fail(message: str, status: int = 2) -> int:
    print(f"logitjudge calibrate: {message}", file=sys.stderr)
    return status


def print_report(report: Mapping[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"calibration: held-out part ({report['n_holdout']} samples; fitted on {report['n_fit']})"
    )
    for col in (
        "group",
        "n",
        "acc",
        "NLL before",
        "NLL after",
        "Brier before",
        "Brier after",
        "ECE before",
        "ECE after",
    ):
        table.add_column(col, justify="left" if col == "group" else "right")
    for section in ("by_bucket", "by_set"):
        for key, ba in report[section].items():
            b, a = ba["before"], ba["after"]
            table.add_row(
                key,
                str(b["n"]),
                f"{b['accuracy']:.3f}",
                f"{b['nll']:.3f}",
                f"{a['nll']:.3f}",
                f"{b['brier']:.3f}",
                f"{a['brier']:.3f}",
                f"{b['ece']:.3f}",
                f"{a['ece']:.3f}",
            )
        table.add_section()
    Console(file=sys.stdout, width=200).print(table)


def run_calibrate(args: argparse.Namespace) -> int:
    """The ``calibrate`` subcommand (see the module docstring)."""
    rows: list[dict[str, Any]] = []
    engines: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for name in args.labelled:
        try:
            results, engine, data = _read_input(Path(name))
        except (OSError, ValueError) as exc:
            return _fail(f"{name}: {exc}")
        rows += results
        pending += data
        if engine:
            engines.append(engine)
    if any(e.get("calibration") for e in engines):
        return _fail("these distributions were produced under a calibration; fit on uncalibrated runs")
    fitted_for: dict[str, Any] | None = engines[0] if engines else None
    if pending or fitted_for is None:
        from logitjudge.cli import load_judge

        if getattr(args, "calibration", None):
            return _fail("--calibration makes no sense here: calibration is fitted on raw distributions")
        try:
            judge = load_judge(args)
        except LogitJudgeError as exc:
            return _fail(f"cannot load the model: {exc.message}", 1)
        described = judge.describe()
        if fitted_for is not None and any(
            fitted_for.get(k) != described.get(k) for k in ("fingerprint", "dtype")
        ):
            return _fail("the result rows come from another model or dtype than --model")
        fitted_for = described
        if pending:
            rows += _run_data_rows(judge, pending, args.batch_size)
    if any(
        e.get(k) != fitted_for.get(k) for e in engines for k in ("fingerprint", "prompt_version", "dtype")
    ):
        return _fail("the inputs come from different engines (fingerprint, prompt version or dtype differ)")
    seen: set[str] = set()
    unique = []
    for r in rows:  # the same item in two inputs counts once (first wins)
        if str(r.get("id")) not in seen:
            seen.add(str(r.get("id")))
            unique.append(r)
    samples = samples_from_rows(unique)
    if not samples:
        return _fail("no labelled distributions in the input (see logitjudge/rubrics/samples.py)")
    cal, report = fit_and_report(
        samples, fitted_for, holdout=args.holdout, seed=args.seed, meta={"data": list(args.labelled)}
    )
    cal.save(args.out)
    print_report(report)
    for name, s in cal.scalings.items():
        bias = "" if s.bias is None else " bias " + ", ".join(f"{b:+.2f}" for b in s.bias)
        print(f"{name}: T={s.temperature:.3f}{bias} (n={s.n}{', clamped' if s.clamped else ''})")
    if args.report:
        _, held = split(samples, args.holdout, args.seed)
        reliability_plot(held, cal, args.report, title=f"{fitted_for.get('model', '')}: held-out reliability")
        print(f"report: {args.report}")
    print(f"calibration: {args.out}")
    return 0
