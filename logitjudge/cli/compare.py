"""``logitjudge compare``: agreement between two result files of the same items (ours vs hosted).

::

    logitjudge compare ours.jsonl hosted.jsonl [--out report.json] [--plots DIR] [--top 10]

What it computes and how: :mod:`logitjudge.rubrics.compare`. This module is the command: its flags,
reading the inputs, printing and writing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from logitjudge.cli.common import add_subcommand
from logitjudge.rubrics.compare import compare_runs, plot_evaluator, read_results


def print_table(report: Mapping[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    it = report["items"]
    table = Table(
        title=f"compare: {it['joined']} joined items (only ours {it['only_ours']}, only theirs {it['only_theirs']})"
    )
    for col in ("evaluator", "n", "pearson", "spearman", "mean |diff|", "agreement", "kappa"):
        table.add_column(col, justify="left" if col == "evaluator" else "right")

    def f(x: float | None) -> str:
        return "–" if x is None else f"{x:.3f}"

    for name, e in report["evaluators"].items():
        table.add_row(
            name,
            str(e["n"]),
            f(e["pearson"]),
            f(e["spearman"]),
            f(e["mean_abs_diff"]),
            f(e["decision_agreement"]),
            f(e["cohen_kappa"]),
        )
    Console(file=sys.stdout, width=160).print(table)
    for name, e in report["evaluators"].items():
        worst = [d for d in e["top_disagreements"][:3] if d["abs_diff"] > 0]
        if worst:
            print(
                f"{name}: most different: "
                + ", ".join(f"{d['id']} ({d['ours']:.2f} vs {d['theirs']:.2f})" for d in worst)
            )


SUMMARY = "agreement of two result files of the same items (ours vs hosted): correlation, decisions, plots"
"""The subcommand's line in ``logitjudge --help``."""


def add_compare_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``compare`` subcommand to the main CLI's subparsers."""
    p = add_subcommand(subparsers, "compare", SUMMARY, __doc__)
    p.add_argument("ours", help="our result rows (logitjudge evaluate --out)")
    p.add_argument("theirs", help="the other result rows (e.g. exported from the hosted API), same shape")
    p.add_argument("--out", default=None, help="write the report JSON here")
    p.add_argument("--plots", default=None, metavar="DIR", help="write one PNG per evaluator here")
    p.add_argument("--top", type=int, default=10, help="disagreeing items listed per evaluator (default 10)")
    p.set_defaults(func=run_compare)
    return p


def run_compare(args: argparse.Namespace) -> int:
    """The ``compare`` subcommand: exit 0 done, 2 unreadable input or nothing joined."""
    try:
        ours, theirs = read_results(args.ours), read_results(args.theirs)
    except (OSError, ValueError) as exc:
        print(f"logitjudge compare: {exc}", file=sys.stderr)
        return 2
    report = compare_runs(ours, theirs, top=args.top)
    report["files"] = {"ours": str(args.ours), "theirs": str(args.theirs)}
    if not report["items"]["joined"]:
        print("logitjudge compare: no item id appears in both files", file=sys.stderr)
        return 2
    print_table(report)
    if args.plots:
        out_dir = Path(args.plots)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, e in report["evaluators"].items():
            pairs = [
                (float(ours[i]["results"][name]["score"]), float(theirs[i]["results"][name]["score"]))
                for i in ours
                if i in theirs
                and name in ours[i]["results"]
                and name in theirs[i]["results"]
                and ours[i]["results"][name].get("score") is not None
                and theirs[i]["results"][name].get("score") is not None
            ]
            if pairs:
                plot_evaluator(name, pairs, e["thresholds"], out_dir / f"{name}.png")
        report["plots"] = str(out_dir)
        print(f"plots: {out_dir}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        print(f"report: {args.out}")
    return 0
