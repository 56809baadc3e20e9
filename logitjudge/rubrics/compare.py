"""``logitjudge compare``: agreement between two result files of the same items (ours vs hosted).

::

    logitjudge compare ours.jsonl hosted.jsonl [--out report.json] [--plots DIR] [--top 10]

Both files hold ``logitjudge evaluate`` result rows (one JSON object per line with ``id`` and
``results: {evaluator: {score, passed, label, status, ...}}``), or a JSON file with such rows
under ``results`` (the shape of a batch ``POST /api/v1/evaluate`` response, e.g. exported from
the hosted API), or a ``benchmarks/quality/quality.py`` JSON (its per-item rows). Items are joined on
``id``; an item or evaluator present on one side only is counted, never guessed.

Per evaluator (both sides ``status: ok``):

- ``pearson`` and ``spearman`` correlation of ``score`` (scipy.stats; null with a reason when a
  side is constant or fewer than 3 items);
- ``mean_abs_diff`` of ``score``;
- ``decision_agreement``: share of items with the same decision -- ``passed`` at each side's
  pass threshold; for a typed choice (no pass rule) the chosen label, for a typed yes/no
  ``score >= 0.5`` -- with Cohen's kappa and the confusion matrix (scikit-learn; rows = ours,
  columns = the other side);
- ``top_disagreements``: the items whose scores differ most (decision disagreements first).

Prints a table, writes the report JSON (``--out``) and, with ``--plots``, one PNG per evaluator
(scatter of the two scores with the diagonal and the thresholds, and a histogram of the
differences).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["read_results", "compare_runs", "plot_evaluator"]


def read_results(path: str | Path) -> dict[str, dict[str, Any]]:
    """Result rows keyed by ``id`` (JSONL rows, or a JSON object with a ``results`` list).

    Raises:
        ValueError: not result rows, a row without an ``id``, or a duplicated id.
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".json":
        data = json.loads(text)
        if isinstance(data, Mapping) and isinstance(data.get("items"), Mapping):  # benchmarks/quality/quality.py
            data = {"results": [r for rows in data["items"].values() for r in rows]}
        rows = data.get("results") if isinstance(data, Mapping) else data
        if not isinstance(rows, list):
            raise ValueError(f"{p}: expected a list of result rows under `results`")
    else:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    out: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or not isinstance(row.get("results"), Mapping):
            raise ValueError(f"{p}: row {i + 1} has no `results` object (not a result row)")
        if row.get("id") is None:
            raise ValueError(f"{p}: row {i + 1} has no `id`; compare joins items on id")
        rid = str(row["id"])
        if rid in out:
            raise ValueError(f"{p}: duplicate id {rid!r}")
        out[rid] = dict(row)
    return out


def _decision(res: Mapping[str, Any]) -> Any:
    """What a result decides: ``passed``; else a typed choice's label; else ``score >= 0.5``."""
    if res.get("passed") is not None:
        return bool(res["passed"])
    answer = res.get("answer") or {}
    if answer.get("type") == "choice":
        return str(res.get("label"))
    if res.get("score") is not None:
        return float(res["score"]) >= 0.5
    return None


def _corr(fn: Any, a: Sequence[float], b: Sequence[float]) -> tuple[float | None, str | None]:
    if len(a) < 3:
        return None, "fewer than 3 items with both scores"
    if np.std(a) == 0 or np.std(b) == 0:
        return None, "one side's scores are constant"
    value = float(fn(a, b)[0])
    return (value, None) if math.isfinite(value) else (None, "undetermined")


def compare_evaluator(
    name: str, pairs: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]], *, top: int = 10
) -> dict[str, Any]:
    """Agreement figures of one evaluator over joined ``(id, ours, theirs)`` results (both ok)."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import cohen_kappa_score, confusion_matrix

    scored = [
        (i, float(a["score"]), float(b["score"]))
        for i, a, b in pairs
        if a.get("score") is not None and b.get("score") is not None
    ]
    xs, ys = [s for _, s, _ in scored], [t for _, _, t in scored]
    pearson, p_why = _corr(pearsonr, xs, ys)
    spearman, s_why = _corr(spearmanr, xs, ys)
    decided = [(i, _decision(a), _decision(b)) for i, a, b in pairs]
    decided = [(i, x, y) for i, x, y in decided if x is not None and y is not None]
    out: dict[str, Any] = {
        "evaluator": name,
        "n": len(pairs),
        "n_scored": len(scored),
        "pearson": pearson,
        "pearson_reason": p_why,
        "spearman": spearman,
        "spearman_reason": s_why,
        "mean_abs_diff": float(np.mean(np.abs(np.subtract(xs, ys)))) if scored else None,
        "mean_diff": float(np.mean(np.subtract(xs, ys))) if scored else None,
        "thresholds": sorted(
            {float(r["threshold"]) for _, a, b in pairs for r in (a, b) if r.get("threshold") is not None}
        ),
        "n_decided": len(decided),
        "decision_agreement": None,
        "cohen_kappa": None,
        "confusion": None,
    }
    if decided:
        ours, theirs = [x for _, x, _ in decided], [y for _, _, y in decided]
        labels = sorted(
            {*ours, *theirs},
            key=lambda v: (not isinstance(v, bool), -int(v) if isinstance(v, bool) else 0, str(v)),
        )
        out["decision_agreement"] = float(np.mean([x == y for x, y in zip(ours, theirs)]))
        if len(labels) > 1:
            kappa = float(cohen_kappa_score([str(v) for v in ours], [str(v) for v in theirs]))
            out["cohen_kappa"] = kappa if math.isfinite(kappa) else None
        out["confusion"] = {
            "labels": [str(v) for v in labels],
            "rows": "ours",
            "columns": "theirs",
            # one label: every pair agrees (sklearn warns on a 1x1 matrix)
            "matrix": [[len(ours)]]
            if len(labels) == 1
            else confusion_matrix(
                [str(v) for v in ours], [str(v) for v in theirs], labels=[str(v) for v in labels]
            ).tolist(),
        }
    by_id = {i: (a, b) for i, a, b in pairs}
    flips = {i for i, x, y in decided if x != y}
    ranked = sorted(scored, key=lambda t: (t[0] not in flips, -abs(t[1] - t[2])))
    out["top_disagreements"] = [
        {
            "id": i,
            "ours": s,
            "theirs": t,
            "abs_diff": abs(s - t),
            "ours_decision": _decision(by_id[i][0]),
            "theirs_decision": _decision(by_id[i][1]),
            "ours_label": by_id[i][0].get("label"),
            "theirs_label": by_id[i][1].get("label"),
        }
        for i, s, t in ranked[:top]
    ]
    return out


def compare_runs(
    ours: Mapping[str, Mapping[str, Any]], theirs: Mapping[str, Mapping[str, Any]], *, top: int = 10
) -> dict[str, Any]:
    """Join two result sets on id and compare every evaluator present on both sides."""
    common = [i for i in ours if i in theirs]
    names: list[str] = []
    for i in common:
        for name in ours[i]["results"]:
            if name in theirs[i]["results"] and name not in names:
                names.append(name)
    evaluators = {}
    for name in names:
        pairs, not_ok = [], 0
        for i in common:
            a, b = ours[i]["results"].get(name), theirs[i]["results"].get(name)
            if a is None or b is None:
                continue
            if a.get("status") == "ok" and b.get("status") == "ok":
                pairs.append((i, a, b))
            else:
                not_ok += 1
        evaluators[name] = {**compare_evaluator(name, pairs, top=top), "not_ok_on_a_side": not_ok}
    return {
        "items": {
            "ours": len(ours),
            "theirs": len(theirs),
            "joined": len(common),
            "only_ours": len(ours) - len(common),
            "only_theirs": len(theirs) - len(common),
        },
        "evaluators": evaluators,
    }


def plot_evaluator(
    name: str,
    pairs: Sequence[tuple[float, float]],
    thresholds: Sequence[float],
    path: str | Path,
    labels: tuple[str, str] = ("ours", "theirs"),
) -> None:
    """Scatter of the two scores (diagonal, thresholds) and a histogram of the differences."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs, ys = [a for a, _ in pairs], [b for _, b in pairs]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 4))
    ax1.scatter(xs, ys, s=14, alpha=0.7)
    ax1.plot([0, 1], [0, 1], "k:", lw=1)
    for t in thresholds:
        ax1.axvline(t, color="grey", lw=0.8, ls="--")
        ax1.axhline(t, color="grey", lw=0.8, ls="--")
    ax1.set(
        xlim=(-0.02, 1.02),
        ylim=(-0.02, 1.02),
        xlabel=f"{labels[0]} score",
        ylabel=f"{labels[1]} score",
        title=f"{name} (n={len(pairs)})",
    )
    ax2.hist(np.subtract(xs, ys), bins=20, range=(-1, 1))
    ax2.set(xlabel=f"{labels[0]} - {labels[1]}", ylabel="items", title="score difference")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
