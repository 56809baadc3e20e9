"""A self-contained HTML report of a dataset evaluation (plots embedded as base64 PNG).

At the top: the data, the results file and the model that produced the results (its name and
fingerprint prefix from ``judge.describe()``, prompt version, dtype, calibration). Per
evaluator: the summary metrics, a histogram of scores, and, where gold pass labels exist, a
reliability diagram (mean score per bin against the share of items whose gold label is
"should pass"; the diagonal is perfect calibration). Then one table row per item and evaluator
(id, evaluator, status, score, passed, gold, option mass), with results that disagree with
their gold label and answers under :data:`~logitjudge.settings.LOW_OPTION_MASS` marked. Plots are
made with matplotlib's Agg backend, so no display is needed; the page has no scripts.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

from logitjudge.contract.evaluate import EvaluatorSummary
from logitjudge.rubrics.aggregate import Gold, reliability_bins
from logitjudge.settings import LOW_OPTION_MASS

__all__ = ["build_report", "format_value", "model_line", "MAX_ITEM_ROWS"]

MAX_ITEM_ROWS = 5000
"""Most rows of the per-item table (the results file has them all)."""


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
tr.low td{background:#fff3cd}tr.miss td.passed{background:#f8d7da}.warn{color:#8a6d00}
"""


def model_line(engine: Mapping[str, Any] | None) -> str:
    """``"smollm2-135m-instruct (fingerprint a2d3a93f3b08)"`` from an engine description."""
    if not engine:
        return "unknown (no engine description recorded)"
    name = str(engine.get("model") or "unknown")
    fp = engine.get("fingerprint")
    return f"{name} (fingerprint {str(fp)[:12]})" if fp else name


def _gold_text(gold: Gold, name: str) -> tuple[str, bool | None]:
    """(what the gold label says for evaluator ``name``, the gold pass verdict if any)."""
    if name in gold.passed:
        verdict = gold.passed[name]
        return ("should pass" if verdict else "should fail"), verdict
    if name in gold.pair:
        pair_id, preferred = gold.pair[name]
        return f"pair {pair_id}: {'preferred' if preferred else 'not preferred'}", None
    if name == "typed_question" and (gold.answer is not None or gold.unknown):
        return ("unknown" if gold.unknown else str(gold.answer)), None
    return "–", None


def _item_row(rid: str, name: str, res: Mapping[str, Any], gold: Gold) -> tuple[str, bool]:
    """(one ``<tr>`` of the items table, whether its option mass is low)."""
    mass = res.get("x_option_mass")
    low = isinstance(mass, (int, float)) and mass < LOW_OPTION_MASS
    gold_text, verdict = _gold_text(gold, name)
    passed = res.get("passed")
    miss = verdict is not None and passed is not None and passed != verdict
    classes = " ".join(c for c, on in (("low", low), ("miss", miss)) if on)
    status = str(res.get("status", "?"))
    note = ["⚠ low" if low else "", str(res.get("reason") or "") if status != "ok" else ""]
    cells = [
        rid,
        html.escape(name),
        html.escape(status),
        format_value(res.get("score")),
        "–" if passed is None else ("yes" if passed else "no"),
        html.escape(gold_text),
        format_value(mass, 4),
        html.escape(" ".join(n for n in note if n)),
    ]
    tds = "".join(f"<td class='passed'>{c}</td>" if i == 4 else f"<td>{c}</td>" for i, c in enumerate(cells))
    return (f"<tr class='{classes}'>" if classes else "<tr>") + tds + "</tr>", low


def _item_rows(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], int, int]:
    """(table rows, results in all, results with low option mass) of the per-item table."""
    out: list[str] = []
    total = low = 0
    for r in rows:
        rid = html.escape(str(r.get("id")))
        if r.get("error"):
            total += 1
            if len(out) < MAX_ITEM_ROWS:
                why = html.escape(str(r["error"]))
                out.append(f"<tr><td>{rid}</td><td>–</td><td>error</td><td colspan='5'>{why}</td></tr>")
            continue
        gold = Gold.model_validate(r["gold"]) if r.get("gold") else Gold()
        for name, res in (r.get("results") or {}).items():
            row, is_low = _item_row(rid, name, res, gold)
            total += 1
            low += is_low
            if len(out) < MAX_ITEM_ROWS:
                out.append(row)
    return out, total, low


def build_report(
    summary: Mapping[str, EvaluatorSummary],
    rows: Sequence[Mapping[str, Any]],
    *,
    title: str,
    meta: Mapping[str, Any],
    engine: Mapping[str, Any] | None = None,
) -> str:
    """The HTML text of the report for result ``rows`` and their ``summary``.

    Args:
        meta: shown at the top as ``key: value`` lines (data, results file, evaluators, ...).
        engine: the description of the engine that produced the rows (``judge.describe()``, or
            the results file's run record): shown as the model line, name and fingerprint prefix.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    head = dict(meta)
    if engine is not None or "model" not in head:
        head["model"] = model_line(engine)
        for key in ("prompt_version", "dtype", "calibration"):
            if engine and engine.get(key) is not None:
                head[key] = engine[key]
    item_rows, n_results, n_low = _item_rows(rows)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p class='meta'>",
        "<br>".join(f"<b>{html.escape(str(k))}</b>: <code>{html.escape(str(v))}</code>" for k, v in head.items()),
        "</p>",
    ]
    if n_low:
        parts.append(
            f"<p class='warn'>⚠ {n_low} result(s) with option mass under {LOW_OPTION_MASS}: the model put "
            "almost no probability on the answer labels there, so their scores rest on almost nothing "
            "(marked in the items table; metric <code>low_option_mass</code>).</p>"
        )
    for name, s in summary.items():
        scores = [
            float(r["results"][name]["score"])
            for r in rows
            if r.get("results", {}).get(name, {}).get("status") == "ok" and r["results"][name].get("score") is not None
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
    parts.append("<section><h2>Items</h2>")
    if n_results > MAX_ITEM_ROWS:
        parts.append(f"<p>the first {MAX_ITEM_ROWS} of {n_results} results; all are in the results file</p>")
    parts.append(
        "<table class='items'><tr><th>id</th><th>evaluator</th><th>status</th><th>score</th>"
        "<th>passed</th><th>gold</th><th>option mass</th><th>note</th></tr>"
    )
    parts += item_rows
    parts.append("</table></section>")
    parts.append("</body></html>")
    return "\n".join(parts)
