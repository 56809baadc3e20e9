"""A self-contained HTML report of a dataset evaluation, to read the numbers and to debug a row.

One offline file: plots embedded as base64 PNG (matplotlib's Agg backend, no display needed),
CSS and a small inline script for the filters; nothing is fetched.

- **Header**: the data, the results file and the model that produced the results (its name and
  fingerprint prefix from ``judge.describe()``, prompt version, dtype, calibration).
- **Per evaluator**: the summary metrics with their ``n``, standard error and a 95% interval
  (value ± 1.96 stderr, clipped to [0, 1] for shares and AUROC); metrics computed on fewer
  than :data:`SMALL_N` items are marked (a warning above the table and ⚠ on the row); a
  histogram of scores and, where gold pass labels exist, a reliability diagram (mean score per
  bin against the share of items whose gold label is "should pass"; the diagonal is perfect
  calibration).
- **Items**: one collapsible block per item. Its summary line has the id, each evaluator's
  score and verdict with the gold label where present, and flags: ``✗ gold`` where a verdict
  disagrees with its gold label, ``⚠ low`` where an answer's option mass is under
  :data:`~logitjudge.settings.LOW_OPTION_MASS`. Opened: the item's texts (input, output,
  expected, each context chunk; each collapsible, HTML-escaped), a table of every evaluator's
  status, label, score, threshold, gold and option mass, and per-chunk (or per-claim) verdicts
  with their probabilities and the chunk's text. Skipped evaluators are one collapsed line per
  item. Filters: evaluator, pass/fail, disagreement with gold, low option mass and a text search;
a link can preset them (``report.html#ev=faithfulness&status=failed&miss=1``).

The texts come from the data rows (``sources``: id -> the row as read); the results file holds
only lengths, so a report built without them says so.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from logitjudge.contract.evaluate import EvaluatorSummary
from logitjudge.rubrics.aggregate import Gold, reliability_bins
from logitjudge.settings import LOW_OPTION_MASS

__all__ = ["build_report", "format_value", "model_line", "MAX_ITEM_ROWS", "SMALL_N"]

MAX_ITEM_ROWS = 5000
"""Most items shown in the items section (the results file has them all)."""

SMALL_N = 20
"""Metrics computed on fewer items than this are marked as unreliable."""

MAX_TEXT_CHARS = 20_000
"""Longest text shown in full per field (longer ones are cut, with a note)."""

_FIELDS = (
    ("input", ("input", "question", "user_input")),
    ("output", ("output", "answer", "response")),
    ("expected", ("expected", "ground_truth", "ground_truths", "reference")),
    ("context", ("context", "contexts", "retrieved_contexts")),
)
"""The texts shown first, under our names (RAGAS names accepted); other fields follow."""

_HIDDEN_FIELDS = frozenset({"id", "evaluator", "gold", "meta"})


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
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#222;max-width:80rem}
table{border-collapse:collapse;margin:.5rem 0 1rem}
td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:right;vertical-align:top}
th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}section{margin-bottom:2rem}
img{margin-right:1rem;vertical-align:top}
.meta{color:#555;font-size:.9rem}code{background:#f5f5f5;padding:0 .2rem}
.warn{color:#8a6d00}.smalln td{background:#fffbe6}
table.metrics td:nth-child(5){white-space:nowrap}
table.metrics td:last-child,table.metrics th:last-child{text-align:left}
tr.low td{background:#fff3cd}tr.miss td.passed{background:#f8d7da}
details.item{border:1px solid #ddd;border-radius:4px;margin:.3rem 0;padding:.2rem .5rem}
details.item.miss{border-left:4px solid #d9534f}details.item.low{border-left:4px solid #f0ad4e}
details.item>summary{cursor:pointer;font-size:.92rem}
.id{font-weight:600;font-family:ui-monospace,monospace}
.badge{display:inline-block;margin:0 .2rem;padding:0 .35rem;border-radius:3px;background:#eef;font-size:.85rem}
.badge.pass{background:#e3f3e3}.badge.fail{background:#f7e1e1}.badge.error{background:#eee;color:#a00}
.flag{color:#b02a00;font-weight:600;margin-left:.3rem}
.texts details{margin:.2rem 0}.texts summary{cursor:pointer;color:#345}
pre{white-space:pre-wrap;word-break:break-word;background:#fafafa;border:1px solid #eee;padding:.4rem;margin:.2rem 0;
max-height:24rem;overflow:auto;font-size:.85rem}
table.results td:nth-child(2),table.chunks td:nth-child(2),table.results th:nth-child(2),
table.chunks th:nth-child(2){text-align:left}
table.chunks{font-size:.85rem;margin:.2rem 0 .4rem 1rem}table.chunks td.text{text-align:left;max-width:40rem}
.skipped{color:#666;font-size:.85rem}
#filters{position:sticky;top:0;background:#fff;padding:.4rem 0;border-bottom:1px solid #ddd;z-index:1}
#filters label{margin-right:1rem}
"""

_SCRIPT = """
(function(){
  var q=function(s){return document.querySelector(s);};
  var items=Array.prototype.slice.call(document.querySelectorAll('details.item'));
  function apply(){
    var ev=q('#f-ev').value, st=q('#f-status').value, miss=q('#f-miss').checked, low=q('#f-low').checked;
    var text=q('#f-text').value.toLowerCase(), shown=0;
    items.forEach(function(it){
      var rows=Array.prototype.slice.call(it.querySelectorAll('tr.result'));
      var any=false;
      rows.forEach(function(r){
        var ok=(ev==='*'||r.dataset.ev===ev)&&(st==='*'||r.dataset.status===st)
          &&(!miss||r.dataset.miss==='1')&&(!low||r.dataset.low==='1');
        r.hidden=!ok; var c=r.nextElementSibling;
        if(c&&c.classList.contains('chunkrow')){c.hidden=!ok;}
        any=any||ok;
      });
      if(!rows.length){any=(ev==='*'&&(st==='*'||st==='error')&&!miss&&!low);}
      if(any&&text){any=it.textContent.toLowerCase().indexOf(text)>=0;}
      it.hidden=!any; if(any){shown++;}
    });
    q('#f-count').textContent=shown+' of '+items.length+' items';
  }
  ['#f-ev','#f-status','#f-miss','#f-low','#f-text'].forEach(function(s){
    q(s).addEventListener('input',apply);q(s).addEventListener('change',apply);});
  q('#f-open').addEventListener('click',function(){items.forEach(function(i){if(!i.hidden){i.open=true;}});});
  q('#f-close').addEventListener('click',function(){items.forEach(function(i){i.open=false;});});
  // a link can preset the filters: report.html#ev=faithfulness&status=failed&miss=1&low=1&text=paris
  (location.hash.slice(1)||'').split('&').forEach(function(kv){
    var p=kv.split('='),k=p[0],v=decodeURIComponent(p[1]||'');
    if(k==='ev'){q('#f-ev').value=v;}else if(k==='status'){q('#f-status').value=v;}
    else if(k==='miss'){q('#f-miss').checked=v==='1';}else if(k==='low'){q('#f-low').checked=v==='1';}
    else if(k==='text'){q('#f-text').value=v;}
  });
  apply();
})();
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


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def _pre(value: Any) -> str:
    text = _text_of(value)
    cut = len(text) > MAX_TEXT_CHARS
    shown = text[:MAX_TEXT_CHARS]
    note = f"<div class='warn'>cut at {MAX_TEXT_CHARS:,} of {len(text):,} characters</div>" if cut else ""
    return f"<pre>{_esc(shown)}</pre>{note}"


def _field(source: Mapping[str, Any], names: Sequence[str]) -> Any:
    for n in names:
        if source.get(n) not in (None, "", []):
            return source[n]
    return None


def _chunks(value: Any) -> list[Any]:
    """A context as its chunks: a list as is, a JSON-list string decoded, any other value as one chunk."""
    if isinstance(value, list):
        return value
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            decoded = json.loads(value)
        except ValueError:
            return [value]
        return decoded if isinstance(decoded, list) else [value]
    return [] if value is None else [value]


def _texts(source: Mapping[str, Any] | None) -> tuple[str, list[Any], list[str]]:
    """(the texts block of an item, its context chunks, its output's claims)."""
    if source is None:
        return "<p class='skipped'>texts not available: the report was built without the data rows</p>", [], []
    parts = ["<div class='texts'>"]
    used: set[str] = set()
    chunks: list[Any] = []
    claims: list[str] = []
    for label, names in _FIELDS:
        value = _field(source, names)
        used.update(names)
        if value is None:
            continue
        if label == "context":
            chunks = _chunks(value)
            parts.append(f"<details><summary>context ({len(chunks)} chunk{'s' * (len(chunks) != 1)})</summary>")
            for i, chunk in enumerate(chunks):
                parts.append(f"<div>chunk {i}</div>{_pre(chunk)}")
            parts.append("</details>")
            continue
        if label == "output":
            claims = _claims(value)
        size = len(_text_of(value))
        parts.append(f"<details><summary>{label} ({size:,} chars)</summary>{_pre(value)}</details>")
    for key, value in source.items():
        if key in used or key in _HIDDEN_FIELDS or value in (None, "", [], {}):
            continue
        parts.append(f"<details><summary>{_esc(key)}</summary>{_pre(value)}</details>")
    parts.append("</div>")
    return "".join(parts), chunks, claims


def _claims(output: Any) -> list[str]:
    """The claims a per-claim evaluator asked about (the output's sentences), as the runner splits them."""
    try:
        from logitjudge.rubrics.questions import split_sentences

        if isinstance(output, str):
            return split_sentences(output) or [output.strip()]
        return [json.dumps(output, ensure_ascii=False, separators=(",", ":"))]
    except Exception:  # informative only: the verdicts are shown without their text
        return []


def _unit_of(name: str) -> str:
    """``"chunk"``, ``"claim"`` or ``""``: what an evaluator's details are one per."""
    try:
        from logitjudge.rubrics.registry import default_registry

        defn = default_registry().evaluators.get(name)
    except Exception:  # informative only
        defn = None
    if defn is not None and getattr(defn, "per_chunk", False):
        return "chunk"
    if defn is not None and getattr(defn, "per_claim", False):
        return "claim"
    return "chunk" if name.startswith("chunk_") else ""


def _probabilities(d: Mapping[str, Any]) -> str:
    probs = d.get("probabilities")
    if isinstance(probs, Mapping) and probs:
        return " ".join(f"{_esc(k)}={float(v):.2f}" for k, v in probs.items() if isinstance(v, (int, float)))
    p = d.get("probability")
    return f"p(yes)={float(p):.3f}" if isinstance(p, (int, float)) else "–"


def _short(text: str, n: int = 300) -> str:
    return text if len(text) <= n else text[:n] + "…"


def _chunk_table(name: str, details: Sequence[Mapping[str, Any]], chunks: list[Any], claims: list[str]) -> str:
    """The details' table; located verdicts (``x_located``, rows with ``x_chunk``: one per claim)
    add the deciding chunk (for "not found", the one closest to supporting the claim)."""
    located = any(isinstance(d.get("x_chunk"), int) for d in details)
    unit = "claim" if located else _unit_of(name)
    texts: list[Any] = chunks if unit == "chunk" else claims if unit == "claim" else []
    head = unit or "part"
    rows = [
        f"<table class='chunks'><tr><th>{head}</th><th>text</th><th>verdict</th>"
        + ("<th>deciding (or closest) chunk</th>" if located else "")
        + "<th>score</th><th>probabilities</th><th>passed</th></tr>"
    ]
    for d in details:
        i = d.get("index")
        text = str(d["x_claim"]) if located and d.get("x_claim") else ""
        text = text or (_text_of(texts[i]) if isinstance(i, int) and 0 <= i < len(texts) else "")
        passed = d.get("passed")
        where = ""
        if located:
            k = d.get("x_chunk")
            chunk = _text_of(chunks[k]) if isinstance(k, int) and 0 <= k < len(chunks) else ""
            where = f"<td class='text' title='{_esc(chunk[:2000])}'>{_esc(k)}: {_esc(_short(chunk, 160))}</td>"
        rows.append(
            f"<tr><td>{_esc(i)}</td><td class='text' title='{_esc(text[:2000])}'>{_esc(_short(text))}</td>"
            f"<td>{_esc(d.get('label', '–'))}</td>{where}<td>{format_value(d.get('score'))}</td>"
            f"<td>{_probabilities(d)}</td><td>{'–' if passed is None else ('yes' if passed else 'no')}</td></tr>"
        )
    rows.append("</table>")
    return "".join(rows)


def _result_status(res: Mapping[str, Any]) -> str:
    """``passed``, ``failed``, ``error`` or ``none`` (ran without a pass verdict)."""
    if res.get("status") == "error":
        return "error"
    passed = res.get("passed")
    return "none" if passed is None else ("passed" if passed else "failed")


def _item_block(r: Mapping[str, Any], source: Mapping[str, Any] | None) -> tuple[str, int, int]:
    """(one item's ``<details>`` block, its results, its results with low option mass)."""
    rid = _esc(r.get("id"))
    texts, chunks, claims = _texts(source)
    if r.get("error"):
        why = _esc(r["error"])
        return (
            f"<details class='item error'><summary><span class='id'>{rid}</span> "
            f"<span class='badge error'>error</span> {why}</summary>{texts}</details>",
            1,
            0,
        )
    gold = Gold.model_validate(r["gold"]) if r.get("gold") else Gold()
    badges: list[str] = []
    rows: list[str] = []
    skipped: list[str] = []
    n_results = n_low = 0
    item_miss = item_low = False
    for name, res in (r.get("results") or {}).items():
        if res.get("status") == "skipped":
            skipped.append(f"{_esc(name)} ({_esc(res.get('reason') or 'skipped')})")
            continue
        n_results += 1
        mass = res.get("x_option_mass")
        low = isinstance(mass, (int, float)) and mass < LOW_OPTION_MASS
        gold_text, verdict = _gold_text(gold, name)
        passed = res.get("passed")
        miss = verdict is not None and passed is not None and passed != verdict
        n_low += low
        item_miss |= miss
        item_low |= low
        status = _result_status(res)
        flags = ("<span class='flag'>✗ gold</span>" if miss else "") + (
            "<span class='flag'>⚠ low</span>" if low else ""
        )
        kind = {"passed": "pass", "failed": "fail", "error": "error"}.get(status, "")
        gold_note = f" gold: {_esc(gold_text)}" if gold_text != "–" else ""
        badges.append(
            f"<span class='badge {kind}'>{_esc(name)} {format_value(res.get('score'), 2)}"
            f"{' ✓' if status == 'passed' else ' ✗' if status == 'failed' else ''}{gold_note}</span>{flags}"
        )
        classes = " ".join(c for c, on in (("result", True), ("low", low), ("miss", miss)) if on)
        note = _esc(res.get("reason") or "") if status == "error" else ""
        threshold = res.get("threshold")
        rows.append(
            f"<tr class='{classes}' data-ev='{_esc(name)}' data-status='{status}' data-miss='{int(miss)}' "
            f"data-low='{int(low)}'><td>{_esc(name)}</td><td>{_esc(res.get('label') or status)}{note}</td>"
            f"<td>{format_value(res.get('score'))}</td><td>{format_value(threshold, 2)}</td>"
            f"<td class='passed'>{'–' if passed is None else ('yes' if passed else 'no')}</td>"
            f"<td>{_esc(gold_text)}</td><td>{format_value(mass, 4)}</td></tr>"
        )
        for part in ("details", "x_located"):  # located verdicts: one row per claim, with its chunk
            details = res.get(part)
            if details:
                table = _chunk_table(name, details, chunks, claims)
                rows.append(f"<tr class='chunkrow'><td colspan='7'>{table}</td></tr>")
    classes = " ".join(c for c, on in (("item", True), ("miss", item_miss), ("low", item_low)) if on)
    parts = [f"<details class='{classes}'><summary><span class='id'>{rid}</span> {' '.join(badges)}</summary>"]
    parts.append(texts)
    if rows:
        parts.append(
            "<table class='results'><tr><th>evaluator</th><th>label</th><th>score</th><th>threshold</th>"
            "<th>passed</th><th>gold</th><th>option mass</th></tr>"
        )
        parts += rows
        parts.append("</table>")
    if skipped:
        parts.append(
            f"<details class='skipped'><summary>{len(skipped)} skipped</summary>{'<br>'.join(skipped)}</details>"
        )
    parts.append("</details>")
    return "\n".join(parts), n_results, n_low


def _metrics_table(s: EvaluatorSummary) -> list[str]:
    parts = []
    small = [m for m in s.metrics if m.value is not None and m.n < SMALL_N]
    if small:
        parts.append(
            f"<p class='warn'>⚠ {len(small)} metric(s) here rest on fewer than {SMALL_N} items "
            f"(marked ⚠ n&lt;{SMALL_N}): read them with their intervals, not as measurements.</p>"
        )
    parts.append(
        "<table class='metrics'><tr><th>metric</th><th>value</th><th>n</th><th>stderr</th>"
        "<th>95% interval</th><th>note</th></tr>"
    )
    for m in s.metrics:
        note = m.reason or ("" if m.higher_is_better else "lower is better")
        is_small = m.value is not None and m.n < SMALL_N
        if is_small:
            note = f"⚠ n<{SMALL_N}" + (f"; {note}" if note else "")
        interval = "–"
        if m.value is not None and m.stderr is not None:
            lo, hi = m.value - 1.96 * m.stderr, m.value + 1.96 * m.stderr
            if not m.name.startswith("mae"):  # shares, rates, AUROC, ECE: within [0, 1]
                lo, hi = max(0.0, lo), min(1.0, hi)
            interval = f"[{lo:.3f}, {hi:.3f}]"
        parts.append(
            f"<tr{' class=smalln' if is_small else ''}><td>{_esc(m.name)}</td><td>{format_value(m.value)}</td>"
            f"<td>{m.n}</td><td>{format_value(m.stderr)}</td><td>{interval}</td><td>{_esc(note)}</td></tr>"
        )
    parts.append("</table>")
    return parts


def _filters(names: Sequence[str]) -> str:
    options = "".join(f"<option value='{_esc(n)}'>{_esc(n)}</option>" for n in names)
    return (
        "<div id='filters'>"
        f"<label>evaluator <select id='f-ev'><option value='*'>all</option>{options}</select></label>"
        "<label>verdict <select id='f-status'><option value='*'>all</option><option value='passed'>passed</option>"
        "<option value='failed'>failed</option><option value='error'>error</option></select></label>"
        "<label><input type='checkbox' id='f-miss'> disagrees with gold</label>"
        "<label><input type='checkbox' id='f-low'> low option mass</label>"
        "<label>text <input type='search' id='f-text' placeholder='search the texts'></label>"
        "<button type='button' id='f-open'>expand shown</button> "
        "<button type='button' id='f-close'>collapse all</button>"
        " <span id='f-count'></span></div>"
    )


def build_report(
    summary: Mapping[str, EvaluatorSummary],
    rows: Sequence[Mapping[str, Any]],
    *,
    title: str,
    meta: Mapping[str, Any],
    engine: Mapping[str, Any] | None = None,
    sources: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The HTML text of the report for result ``rows`` and their ``summary``.

    Args:
        meta: shown at the top as ``key: value`` lines (data, results file, evaluators, ...).
        engine: the description of the engine that produced the rows (``judge.describe()``, or
            the results file's run record): shown as the model line, name and fingerprint prefix.
        sources: the data rows by id (as read from the data file), for each item's texts and
            chunks; without them the items show results only.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    head = dict(meta)
    if engine is not None or "model" not in head:
        head["model"] = model_line(engine)
        for key in ("prompt_version", "dtype", "calibration"):
            if engine and engine.get(key) is not None:
                head[key] = engine[key]
    blocks: list[str] = []
    n_results = n_low = n_items = 0
    for r in rows:
        block, results, low = _item_block(r, (sources or {}).get(str(r.get("id"))) if sources is not None else None)
        n_results += results
        n_low += low
        n_items += 1
        if len(blocks) < MAX_ITEM_ROWS:
            blocks.append(block)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1><p class='meta'>",
        "<br>".join(f"<b>{_esc(k)}</b>: <code>{_esc(v)}</code>" for k, v in head.items()),
        "</p>",
    ]
    if n_low:
        parts.append(
            f"<p class='warn'>⚠ {n_low} result(s) with option mass under {LOW_OPTION_MASS}: the model put "
            "almost no probability on the answer labels there, so their scores rest on almost nothing "
            "(flagged ⚠ low on the items; metric <code>low_option_mass</code>).</p>"
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
        parts.append(f"<section class='evaluator' id='ev-{_esc(name)}'><h2>{_esc(name)}</h2>")
        parts.append(f"<p>ran on {s.n} items; skipped {s.skipped}; errors {s.errors}</p>")
        if s.n == 0:
            parts.append("<p class='skipped'>no item ran this evaluator (see the skip reasons on the items)</p>")
        else:
            parts += _metrics_table(s)
        if scores:
            parts.append(f"<img alt='{_esc(name)} score histogram' src='{_histogram(name, scores)}'>")
        if pairs:
            src = _reliability(name, [p for p, _ in pairs], [g for _, g in pairs])
            parts.append(f"<img alt='{_esc(name)} reliability diagram' src='{src}'>")
        parts.append("</section>")
    parts.append("<section id='items'><h2>Items</h2>")
    if n_items > MAX_ITEM_ROWS:
        parts.append(f"<p>the first {MAX_ITEM_ROWS} of {n_items} items; all are in the results file</p>")
    if sources is None:
        parts.append("<p class='skipped'>the data rows were not given: items show results, not texts</p>")
    names = [n for n, s in summary.items() if s.n or s.errors]
    parts.append(_filters(names))
    parts += blocks
    parts.append("</section>")
    parts.append(f"<script>{_SCRIPT}</script>")
    parts.append("</body></html>")
    return "\n".join(parts)
