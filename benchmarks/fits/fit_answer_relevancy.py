"""Fit ``answer_relevancy@2``'s level classes on levelled rows derived from WikiEval dev pairs.

    python benchmarks/fits/fit_answer_relevancy.py [--model qwen2.5-coder-1.5b] [--pairs 12] [--seed 0]
        [--features answers_rel,complete_rel,pad] [--rebuild benchmarks/results/answer-relevancy-fit-....json]
        [--reuse benchmarks/results/answer-relevancy-fit-....json]

What it answers: which linear scores per level map the evaluator's features
(:func:`logitjudge.rubrics.scoring.answer_features`) to the page's four levels, and how well
that holds on pairs left out of the fit.

The levels come from the rubric's own definitions applied to WikiEval's construction (RAGAS
paper, Es et al. 2024: each question has a good ``answer`` and a ``poor_answer`` written to be
incomplete), for ``--pairs`` seeded pairs, each with the next pair in the sample as "other":

| derived row | level | the rubric's words |
|---|---|---|
| the pair's ``answer`` | 3 | directly and completely addresses the question, no padding |
| its first sentence, then the first sentence of the other pair's answer | 2 | addresses it with off-topic content |
| with ``--background``: its first sentence, then the sentence of its own Wikipedia context that shares the fewest words with the answer | 2 | addresses it with redundant content |
| the pair's ``poor_answer`` | 1 | partially related but misses the main point |
| the other pair's ``answer`` (to this pair's question) | 0 | does not address the question |

The features are read from the evaluator itself (its ``x_features``: one evaluation per row, on
the model), so the fit sees exactly what the evaluator computes. The model is a multinomial
logistic regression (scikit-learn ``LogisticRegression``, L2, its ``C`` chosen from a small
grid by the cross-validated quadratic weighted kappa): an ordered (proportional odds) model
does not fit these levels, since padding lowers a complete answer's level (3 to 2) while a
padded partial answer sits above a bare partial one (2 over 1). Quality is reported by
leave-pairs-out cross-validation (5 folds grouped by WikiEval pair): level exact accuracy,
quadratic weighted kappa (scikit-learn ``cohen_kappa_score``) and the share of held-out pairs whose ``answer`` scores above its
``poor_answer``. Writes ``benchmarks/results/answer-relevancy-fit-<model>.json`` (the rows'
ids, their features, the fitted ``classes`` block for the catalogue, the CV figures) and
prints the ``classes`` block. The rows fitted on are excluded from the quality benchmark with
``rag_quality.py --exclude`` (their pair ids).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import cohen_kappa_score
from sklearn.model_selection import GroupKFold

from logitjudge.rubrics.definitions import FittedFor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
from _results import DATA, RESULTS, run_metadata  # noqa: E402

EVALUATOR = "answer_relevancy@2"


def derived_rows(pairs: int, seed: int, data: Path = DATA, background: bool = False) -> list[dict[str, Any]]:
    """The levelled rows of the module docstring's table, 4 per pair (5 with ``background``)."""
    from logitjudge.rubrics.questions import split_sentences

    rows = [json.loads(line) for line in (data / "wikieval" / "dev.jsonl").read_text(encoding="utf-8").splitlines()]
    by_pair: dict[str, dict[bool, dict[str, Any]]] = {}
    for r in rows:
        if r["evaluator"] == "answer_relevancy":
            by_pair.setdefault(r["gold"]["pair"], {})[r["gold"]["preferred_in_pair"]] = r
    contexts = {
        r["id"].split(":ff:")[0] + ":ar": r["context"][0]
        for r in rows
        if r["evaluator"] == "faithfulness" and r["context"]
    }
    keys = sorted(k for k, v in by_pair.items() if len(v) == 2 and k in contexts)
    random.Random(seed).shuffle(keys)
    keys = keys[:pairs]
    out = []
    for n, key in enumerate(keys):
        good, poor = by_pair[key][True], by_pair[key][False]
        other = by_pair[keys[(n + 1) % len(keys)]][True]
        question = good["input"]
        first = split_sentences(good["output"])[0]
        drift = f"{first} {split_sentences(other['output'])[0]}"
        used = set(re.findall(r"\w+", good["output"].lower()))
        candidates = [c for c in split_sentences(contexts[key]) if 8 <= len(c.split()) <= 40] or [contexts[key]]
        padding = min(candidates, key=lambda c: len(set(re.findall(r"\w+", c.lower())) & used) / len(c.split()))
        variants = [
            (3, good["output"], "answer"),
            (2, drift, "answer+drift"),
            (2, f"{first} {padding}", "answer+background"),
            (1, poor["output"], "poor_answer"),
            (0, other["output"], "other_answer"),
        ]
        for level, output, tag in variants if background else variants[:2] + variants[3:]:
            out.append({"id": f"{key}:{tag}", "pair": key, "level": level, "input": question, "output": output})
    return out


def features_of(
    model: str, rows: list[dict[str, Any]], batch_size: int, engine: dict[str, Any] | None = None
) -> list[dict[str, float]]:
    """The evaluator's ``x_features`` per row (one evaluation each, on ``model``; ``engine``,
    when given, is updated with the judge's ``describe()``)."""
    from logitjudge import Judge

    judge = Judge.load(model)
    try:
        items = [{"id": r["id"], "input": r["input"], "output": r["output"]} for r in rows]
        run = judge.evaluate(items, [EVALUATOR], batch_size=batch_size)
        if engine is not None:
            engine.update(judge.describe())
    finally:
        judge.close()
    out = []
    for r, res in zip(rows, run.results, strict=True):
        result = res.results["answer_relevancy"]
        if result.status != "ok" or result.x_features is None:
            raise RuntimeError(f"{r['id']}: {result.status} {result.reason}")
        out.append(dict(result.x_features))
    return out


def cross_validated(x: np.ndarray, y: np.ndarray, groups: np.ndarray, c: float) -> np.ndarray:
    """Held-out P(level) per row (5 folds grouped by pair), shape (rows, 4)."""
    pred = np.zeros((len(y), 4))
    for train, test in GroupKFold(n_splits=min(5, len(set(groups)))).split(x, y, groups):
        model = LogisticRegression(C=c, max_iter=5000).fit(x[train], y[train])
        pred[np.ix_(test, model.classes_)] = model.predict_proba(x[test])
    return pred


def figures(rows: list[dict[str, Any]], y: np.ndarray, pred: np.ndarray) -> dict[str, Any]:
    """Level exact accuracy, QWK, pairwise answer-over-poor of held-out predictions."""
    expected = pred @ np.arange(4)
    by_id = {r["id"]: e for r, e in zip(rows, expected, strict=True)}
    pairs = sorted({r["pair"] for r in rows})
    return {
        "level_exact": float((pred.argmax(1) == y).mean()),
        "qwk": float(cohen_kappa_score(y, np.rint(expected).astype(int), weights="quadratic")),
        "pairwise_answer_over_poor": float(np.mean([by_id[f"{p}:answer"] > by_id[f"{p}:poor_answer"] for p in pairs])),
        "mean_expected_by_level": {int(k): float(expected[y == k].mean()) for k in range(4)},
        "n_rows": len(rows),
        "n_pairs": len(pairs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model name or path (default: the default model)")
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--features", default="answers_rel,complete_rel,pad")
    ap.add_argument("--rebuild", type=Path, help="refit from a result file's rows and features (no model)")
    ap.add_argument("--background", action="store_true", help="add the background-padding level-2 rows")
    ap.add_argument(
        "--reuse",
        type=Path,
        help="a result file of the same model and evaluator version: its rows' features are reused",
    )
    args = ap.parse_args()
    from logitjudge.settings import MAIN_MODEL

    model_name = args.model or MAIN_MODEL
    engine: dict[str, Any] = {}  # the judge's describe(), when features are read here
    saved: dict[str, Any] | None = None
    if args.reuse and not args.rebuild:
        saved = json.loads(args.reuse.read_text(encoding="utf-8"))
        known = {r["id"]: r["features"] for r in saved["rows"]}
        rows = derived_rows(args.pairs, args.seed, background=args.background)
        todo = [r for r in rows if r["id"] not in known]
        known.update(
            zip((r["id"] for r in todo), features_of(model_name, todo, args.batch_size, engine) if todo else [])
        )
        feats = [known[r["id"]] for r in rows]
    elif args.rebuild:
        saved = json.loads(args.rebuild.read_text(encoding="utf-8"))
        rows, feats = saved["rows"], [r["features"] for r in saved["rows"]]
    else:
        rows = derived_rows(args.pairs, args.seed, background=args.background)
        feats = features_of(model_name, rows, args.batch_size, engine)
    names = args.features.split(",")
    x = np.array([[f[n] for n in names] for f in feats])
    y = np.array([r["level"] for r in rows])
    groups = np.array([r["pair"] for r in rows])
    grid = {c: figures(rows, y, cross_validated(x, y, groups, c)) for c in (0.3, 1.0, 3.0, 10.0)}
    c = max(grid, key=lambda k: grid[k]["qwk"])
    cv = dict(grid[c], C=c)
    model = LogisticRegression(C=c, max_iter=5000).fit(x, y)
    source = (
        f"multinomial logistic regression (scikit-learn, C={c} by grouped CV) on {len(rows)} levelled rows derived "
        f"from {cv['n_pairs']} WikiEval dev pairs (benchmarks/fits/fit_answer_relevancy.py, seed {args.seed}) on "
        f"{Path(model_name).name} fp32 features; leave-pairs-out CV: level exact {cv['level_exact']:.2f}, "
        f"QWK {cv['qwk']:.2f}"
    )
    classes = {
        str(int(k)): {
            "intercept": round(float(b), 4),
            "weights": {n: round(float(v), 4) for n, v in zip(names, coef, strict=True)},
            "source": source,
        }
        for k, b, coef in zip(model.classes_, model.intercept_, model.coef_, strict=True)
    }
    out = {
        "metadata": run_metadata(),
        "model": model_name,
        "evaluator": EVALUATOR,
        "features": names,
        "cv": cv,
        "cv_by_C": grid,
        "classes": classes,
        # the catalogue's block beside the classes (a rebuild or full reuse keeps the saved one)
        "fitted_for": FittedFor.of(engine).model_dump() if engine else (saved or {}).get("fitted_for"),
        "rows": [dict(r, features=f) for r, f in zip(rows, feats, strict=True)],
    }
    path = args.rebuild or RESULTS / f"answer-relevancy-fit-{Path(model_name).name.lower()}.json"
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"cv": cv, "classes": classes, "fitted_for": out["fitted_for"]}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
