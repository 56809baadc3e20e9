"""context_entity_recall with and without its trained head, on rows the head never saw.

    python benchmarks/quality/entity_recall_head.py [--model qwen2.5-coder-1.5b] [--versions 2,3] [--limit N]

What it answers: does the head (version 3, trained on rows derived from SQuAD by
``benchmarks/fits/entity_recall_rows.py``) stop the model from saying "present" to entities the
context does not state, above all in long contexts, without losing the levels? Both versions
run on the same rows in one process:

| set | rows | what it is |
|---|---|---|
| ``derived`` | ``hotpotqa_entity_recall_derived`` dev | 3 chunks, gold level from string presence of [answer, title 1, title 2] |
| ``long_absent`` | built here | the same questions' entities against all 10 chunks of *another* HotpotQA question (``hotpotqa_relevance`` dev): long contexts, every entity absent (level 0), none of their distinctive words in the context |
| ``long_derived`` | built here | each ``derived`` row with chunks of another HotpotQA question added until it holds ~10 chunks (only chunks that state none of its absent entities, none of their distinctive words): the same gold levels in long contexts |

Per set and version: level exact accuracy, MAE and quadratic weighted kappa of the level the
score states (``rag_quality.entity_figures``, 95% bootstrap intervals over questions), and for
the entities the model is asked about (the rules cannot find them verbatim; in these sets gold
presence is by string, so every asked entity is absent) the mean P(present) and the share under
0.2. Writes ``benchmarks/results/entity-recall-head-<model>.{json,md}`` with the run's metadata.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from logitjudge.rubrics.entities import find_in, normalise

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
sys.path.insert(0, str(Path(__file__).resolve().parent))  # rag_quality
from _results import DATA, RESULTS, run_metadata, write_result  # noqa: E402
from rag_quality import entity_figures, run_version  # noqa: E402

STOP = {"the", "and", "for", "from", "with", "that", "this", "film", "band", "album", "song", "city", "river"}


def _read(name: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (DATA / name / "dev.jsonl").read_text(encoding="utf-8").splitlines()]


def _absent(entity: str, context: str) -> bool:
    """Not in ``context`` verbatim, and none of its words of 3+ characters (not stop-words) either."""
    norm = normalise(context)
    words = [w for w in normalise(entity).split() if len(w) >= 3 and w not in STOP]
    return not find_in(entity, context) and not any(f" {w} " in norm for w in words)


def long_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``long_absent`` (one per question) and ``long_derived`` (one per derived row) rows."""
    derived = _read("hotpotqa_entity_recall_derived")
    chunks = {r["meta"]["hotpot_id"]: r["context"] for r in _read("hotpotqa_relevance")}
    qids = sorted({r["meta"]["hotpot_id"] for r in derived} & set(chunks))
    first: dict[str, dict[str, Any]] = {}
    for r in derived:
        first.setdefault(r["meta"]["hotpot_id"], r)
    absent = []
    for k, q in enumerate(qids):
        row = first[q]
        entities = list(row["gold"]["entities"])
        for step in range(1, len(qids)):
            other = chunks[qids[(k + step) % len(qids)]]
            if all(_absent(e, "\n".join(other)) for e in entities):
                gold = {"entities": entities, "present": [], "level": 0}
                absent.append({**_item(row), "id": f"long_absent:{q}", "context": other, "gold": gold})
                break
    longer = []
    for n, row in enumerate(derived):
        missing = [e for e in row["gold"]["entities"] if e not in row["gold"].get("present", [])]
        q = row["meta"]["hotpot_id"]
        context = list(row["context"])
        for step in range(1, len(qids)):
            for chunk in chunks[qids[(qids.index(q) + step) % len(qids)]]:
                if len(context) < 10 and all(_absent(e, chunk) for e in missing):
                    context.append(chunk)
        longer.append({**_item(row), "id": f"long_derived:{n}", "context": context, "gold": row["gold"]})
    return absent, longer


def _item(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "evaluator": "context_entity_recall",
        "input": row["input"],
        "output": None,
        "expected": row["expected"],
        "meta": {"hotpot_id": row["meta"]["hotpot_id"]},  # the bootstrap's unit: the source question
    }


def asked_absent(recs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """P(present) of the entities the model was asked about (details labelled "nn% yes")."""
    ps = [
        float(d["probability"])
        for rec in recs
        for d in rec["result"].get("details") or ()
        if re.search(r": \d+% yes$", d.get("label", ""))
    ]
    return {
        "asked": len(ps),
        "mean_p_present": float(np.mean(ps)) if ps else None,
        "share_under_0.2": float(np.mean([p < 0.2 for p in ps])) if ps else None,
        "share_called_present": float(np.mean([p >= 0.5 for p in ps])) if ps else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model name or path (default: the main model)")
    ap.add_argument("--versions", default="2,3")
    ap.add_argument("--limit", type=int, default=None, help="rows per set (default: all)")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    from logitjudge import Judge
    from logitjudge.settings import MAIN_MODEL

    judge = Judge.load(args.model or MAIN_MODEL)
    absent, longer = long_rows()
    sets = {"derived": _read("hotpotqa_entity_recall_derived"), "long_absent": absent, "long_derived": longer}
    sets = {k: v[: args.limit] for k, v in sets.items()}
    engine = judge.describe()
    record: dict[str, Any] = {"metadata": run_metadata(device=str(engine.get("device", "cpu"))), "sets": {}}
    record["metadata"].update({k: engine.get(k) for k in ("model", "precision", "dtype", "heads")})
    versions = args.versions.split(",")
    for name, rows in sets.items():
        recs_of: dict[str, list[dict[str, Any]]] = {v: [] for v in versions}
        for start in range(0, len(rows), args.batch_size):  # every version on a batch in turn: the
            batch = rows[start : start + args.batch_size]  # later ones read the states from the state cache
            for v in versions:
                recs_of[v] += run_version(judge, batch, f"context_entity_recall@{v}", args.batch_size)
        for v in versions:
            recs = recs_of[v]
            figs = entity_figures(rows, recs, args.resamples, 0)
            figs.update(asked_absent(recs))
            figs["result_version"] = sorted({r["result"].get("version", "?") for r in recs})
            figs["warnings"] = sorted({r["result"]["x_warning"] for r in recs if r["result"].get("x_warning")})
            record["sets"].setdefault(name, {"rows": len(rows)})[v] = figs
            print(
                name, v, json.dumps({k: figs[k] for k in ("level_exact_accuracy", "mean_p_present", "share_under_0.2")})
            )
    model = str(record["metadata"].get("model", "model"))
    print(
        write_result(args.out_dir, f"entity-recall-head-{model}", record, markdown(record)).read_text(encoding="utf-8")
    )
    return 0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _fmt(fig: Any) -> str:
    if not isinstance(fig, Mapping) or fig.get("value") is None or fig["value"] != fig["value"]:  # None or NaN
        return "-"
    ci = fig.get("ci")
    return f"{fig['value']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def markdown(record: Mapping[str, Any]) -> str:
    meta = record["metadata"]
    lines = [
        f"# context_entity_recall with and without its head ({meta.get('model')})",
        "",
        f"commit {meta.get('git_sha')}, {meta.get('date')}, {meta.get('device')} "
        f"({meta.get('precision', meta.get('dtype'))}); `python benchmarks/quality/entity_recall_head.py`",
        "",
        "| set | rows | version | level exact [95% CI] | weighted kappa | MAE | asked (absent) | mean P(present) | "
        "P < 0.2 | called present |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, per in record["sets"].items():
        for v, f in per.items():
            if v == "rows":
                continue
            mean = "-" if f["mean_p_present"] is None else f"{f['mean_p_present']:.3f}"
            lines.append(
                f"| {name} | {per['rows']} | {v} | {_fmt(f['level_exact_accuracy'])} | "
                f"{_fmt(f['quadratic_weighted_kappa'])} | {_fmt(f['mae_level'])} | {f['asked']} | {mean} | "
                f"{_pct(f['share_under_0.2'])} | {_pct(f['share_called_present'])} |"
            )
    lines += [
        "",
        "Gold presence in these sets is by string, so every entity the model is asked about (not found verbatim) "
        "is absent: the last three columns are about absent entities only. Version 2 reads the model's label "
        "tokens; version 3 reads the trained head (`logitjudge/heads/<model>/context_entity_recall/CARD.md`).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
