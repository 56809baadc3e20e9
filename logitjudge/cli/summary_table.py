"""The summary table ``logitjudge evaluate`` prints: one row per evaluator, its counts and metrics."""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from typing import Any

from logitjudge.contract.evaluate import EvaluatorSummary
from logitjudge.settings import LOW_OPTION_MASS

__all__ = ["TABLE_COLUMNS", "NARROW_COLUMNS", "print_table"]

TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mean_score", "mean"),
    ("pass_rate", "pass"),
    ("low_option_mass", "low mass"),
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
"""Every metric column (``--wide``): (summary key, title)."""

NARROW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mean_score", "mean"),
    ("pass_rate", "pass"),
    ("low_option_mass", "low"),
    ("auroc", "AUROC"),
    ("length_baseline_auroc", "len"),
    ("accuracy", "acc"),
    ("f1", "F1"),
    ("pairwise_accuracy", "pairs"),
    ("chunk_accuracy", "chunk"),
)
"""The default (80-column) table's metric columns, most wanted first; ``--wide``: :data:`TABLE_COLUMNS`."""

NARROW_WIDTH = 80


def _summary_table(summary: dict[str, EvaluatorSummary], shown: Sequence[tuple[str, str]], wide: bool) -> Any:
    from rich import box
    from rich.table import Table

    if wide:
        table = Table(title="logitjudge evaluate: summary")
        counts, digits = ("n", "skipped", "errors"), 3
    else:
        table = Table(title="logitjudge evaluate: summary", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
        counts, digits = ("n", "skip", "err"), 2
    for col in ("evaluator", *counts, *(t for _, t in shown)):
        table.add_column(col, justify="left" if col == "evaluator" else "right", no_wrap=True)
    for name, s in summary.items():
        cells = [name, str(s.n), str(s.skipped), str(s.errors)]
        cells += ["–" if s.value(key) is None else f"{s.value(key):.{digits}f}" for key, _ in shown]
        table.add_row(*cells)
    return table


def print_table(summary: dict[str, EvaluatorSummary], wide: bool = False) -> None:
    """The summary as a table (rich), one row per evaluator: at most 80 columns with two
    decimals (the :data:`NARROW_COLUMNS` that fit, most wanted first), or every
    :data:`TABLE_COLUMNS` column with three when ``wide``; then a line per evaluator with
    answers under the option-mass threshold."""
    from rich.console import Console

    present = [(k, t) for k, t in TABLE_COLUMNS if any(s.value(k) is not None for s in summary.values())]
    if wide:
        Console(file=sys.stdout, width=200).print(_summary_table(summary, present, wide=True))
    else:
        shown = [(k, t) for k, t in NARROW_COLUMNS if any(s.value(k) is not None for s in summary.values())]
        probe = Console(width=1000, file=io.StringIO(), record=True)
        while True:
            table = _summary_table(summary, shown, wide=False)
            probe.print(table)
            width = max((len(line.rstrip()) for line in probe.export_text(clear=True).splitlines()), default=0)
            if width <= NARROW_WIDTH or not shown:
                break
            shown.pop()
        Console(file=sys.stdout, width=NARROW_WIDTH).print(table)
        notes = {
            "low": "low: low mass, the share of answers under the option-mass threshold",
            "len": "len: the length baseline's AUROC",
        }
        for _, title in shown:
            if title in notes:
                print(notes[title])
        if any(s.skipped for s in summary.values()):
            print(
                "skip: rows the evaluator did not run (e.g. a field it needs is missing or empty: its result's reason)"
            )
        if any(s.errors for s in summary.values()):
            print("err: rows whose evaluation failed (its result's reason says why)")
        if len(present) > len(shown):
            print(f"{len(present) - len(shown)} more metric column(s): --wide, or the summary JSON")
    for name, s in summary.items():
        extra = [
            m for m in s.metrics if m.name.startswith(("accuracy_", "mae_", "gold_unknown")) and m.value is not None
        ]
        if name == "typed_question" and extra:
            print("typed_question: " + ", ".join(f"{m.name}={m.value:.3f} (n={m.n})" for m in extra))
    for name, s in summary.items():
        low = s.metric("low_option_mass")
        if low is not None and low.value:
            print(
                f"low option mass: {name}: {round(low.value * low.n)} of {low.n} answers under {LOW_OPTION_MASS}"
                + (
                    " (the model put almost no probability on the answer labels; those scores rest on almost nothing)"
                    if wide
                    else "\n  (almost no probability on the labels: those scores rest on almost nothing)"
                )
            )
