"""A self-contained HTML report of a dataset evaluation (plots embedded as base64 PNG).

Per evaluator: the summary metrics, a histogram of scores, and, where gold pass labels exist, a
reliability diagram (mean score per bin against the share of items whose gold label is
"should pass"; the diagonal is perfect calibration). Plots are made with matplotlib's Agg
backend, so no display is needed.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

from logitjudge.rubrics.aggregate import Gold, reliability_bins
from logitjudge.rubrics.results import EvaluatorSummary

__all__ = ["build_report", "format_value"]


def format_value(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _histogram(name: str, scores: Sequence[float]) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.2, 2.8))
    ax.hist(scores, bins=20, range=(0.0, 1.0), color="#4C72B0", edgecolor="white")
    ax.set_xlim(0, 1)
    ax.set_xlabel("score")
    ax.set_ylabel("items")
    ax.set_title(f"{name}: scores (n={len(scores)})", fontsize=10)
    return _png(fig)


def _reliability(name: str, scores: Sequence[float], truth: Sequence[bool]) -> str:
    import matplotlib.pyplot as plt

    bins = reliability_bins(scores, truth)
    fig, ax = plt.subplots(figsize=(3.6, 3.4))
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1)
    xs = [b["mean_score"] for b in bins]
    ys = [b["frac_true"] for b in bins]
    sizes = [20 + 200 * b["n"] / max(1, len(scores)) for b in bins]
    ax.plot(xs, ys, color="#DD8452", linewidth=1)
    ax.scatter(xs, ys, s=sizes, color="#DD8452", zorder=3)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean score in bin")
    ax.set_ylabel("share gold = should pass")
    ax.set_title(f"{name}: reliability (n={len(scores)})", fontsize=10)
    return _png(fig)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#222;max-width:72rem}
table{border-collapse:collapse;margin:.5rem 0 1rem}
td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}
th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}section{margin-bottom:2rem}
img{margin-right:1rem;vertical-align:top}
.meta{color:#555;font-size:.9rem}code{background:#f5f5f5;padding:0 .2rem}
"""


def build_report(
    summary: Mapping[str, EvaluatorSummary],
    rows: Sequence[Mapping[str, Any]],
    *,
    title: str,
    meta: Mapping[str, Any],
) -> str:
    """The HTML text of the report for result ``rows`` and their ``summary``."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p class='meta'>",
        "<br>".join(
            f"<b>{html.escape(str(k))}</b>: <code>{html.escape(str(v))}</code>" for k, v in meta.items()
        ),
        "</p>",
    ]
    for name, s in summary.items():
        scores = [
            float(r["results"][name]["score"])
            for r in rows
            if r.get("results", {}).get(name, {}).get("status") == "ok"
            and r["results"][name].get("score") is not None
        ]
        pairs = []
        for r in rows:
            res = r.get("results", {}).get(name)
            if not res or res.get("status") != "ok" or res.get("score") is None or not r.get("gold"):
                continue
            gold = Gold.model_validate(r["gold"])
            if name in gold.passed:
                pairs.append((float(res["score"]), gold.passed[name]))
        parts.append(f"<section><h2>{html.escape(name)}</h2>")
        parts.append(f"<p>ran on {s.n} items; skipped {s.skipped}; errors {s.errors}</p>")
        parts.append("<table><tr><th>metric</th><th>value</th><th>n</th><th>stderr</th><th>note</th></tr>")
        for m in s.metrics:
            note = m.reason or ("" if m.higher_is_better else "lower is better")
            parts.append(
                f"<tr><td>{html.escape(m.name)}</td><td>{format_value(m.value)}</td><td>{m.n}</td>"
                f"<td>{format_value(m.stderr)}</td><td>{html.escape(note)}</td></tr>"
            )
        parts.append("</table>")
        if scores:
            parts.append(f"<img alt='{html.escape(name)} score histogram' src='{_histogram(name, scores)}'>")
        if pairs and len({g for _, g in pairs}) >= 1:
            src = _reliability(name, [p for p, _ in pairs], [g for _, g in pairs])
            parts.append(f"<img alt='{html.escape(name)} reliability diagram' src='{src}'>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)
