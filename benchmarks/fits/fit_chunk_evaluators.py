"""Fit the per-chunk evaluators' shipped coefficients again, from their own x_features.

    python benchmarks/fits/fit_chunk_evaluators.py --evaluator chunk_support@3 [--model qwen2.5-coder-1.5b]
    python benchmarks/fits/fit_chunk_evaluators.py --evaluator chunk_relevance@2

What it answers: where do ``chunk_relevance@2``'s ``combine`` and ``chunk_support@3``'s ``classes``
(``logitjudge/rubrics/catalogue.json``) come from, and do they come out the same when fitted
again? The evaluator runs on the dev rows its coefficients were fitted on (the ids in
``benchmarks/results/rag-fit-rows.json``: every ``hotpotqa_relevance`` question, 60 ``vitaminc``
rows), each chunk's ``x_features`` (what the evaluator computes before its coefficients) are read
from its result, and the model is fitted on the chunks' gold labels with scikit-learn:

| evaluator | features | model | cross-validation |
|---|---|---|---|
| ``chunk_relevance@2`` | ``pmi``, ``yes_rel``, ``pmi_c``, ``yes_rel_c`` | logistic regression, C=1, classes weighted to a 50% prior | 5 folds grouped by question: per-chunk AUROC, accuracy at 0.5; beside it the shorter-chunk AUROC |
| ``chunk_support@3`` | ``true_rel``, ``false_rel``, ``consistent_rel`` | multinomial logistic regression, C=1 | 5 stratified folds: 3-way accuracy, macro-F1, share called "supports" |

``chunk_relevance@2``'s features do not depend on its coefficients, so a refit on them should
give the shipped values back to rounding. ``chunk_support@3``'s do, a little: where the output
splits into several claims, a chunk's features are those of the claim the shipped coefficients
find it speaks to most, and the shipped coefficients were fitted on ``chunk_support@2``'s
features (the same probes about the whole output); so its refit is close, not equal (measured:
largest difference 0.096, same signs). The shipped values are used only for that comparison
(largest absolute difference, printed at the end). Writes
``benchmarks/results/fit-<evaluator>-<model>.json`` (rows' features and gold, the fitted block,
the cross-validated figures) and prints the block.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score, roc_auc_score
from sklearn.model_selection import GroupKFold, StratifiedKFold, cross_val_predict

from logitjudge.rubrics.definitions import FittedFor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
from _results import DATA, RESULTS, run_metadata  # noqa: E402

FITS = {
    "chunk_relevance@2": {"set": "hotpotqa_relevance", "features": ["pmi", "yes_rel", "pmi_c", "yes_rel_c"]},
    "chunk_support@3": {"set": "vitaminc", "features": ["true_rel", "false_rel", "consistent_rel"]},
}


def chunk_rows(
    evaluator: str, model: str | None, batch_size: int, engine: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One row per chunk of the fit rows: its item id, gold label, length and features
    (``engine``, when given, is updated with the judge's ``describe()``)."""
    from logitjudge import Judge

    name = FITS[evaluator]["set"]
    ids = set(json.loads((RESULTS / "rag-fit-rows.json").read_text(encoding="utf-8"))["ids"][name])
    rows = [json.loads(line) for line in (DATA / name / "dev.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["id"] in ids]
    judge = Judge.load(model)
    try:
        items = [{"id": r["id"], "input": r["input"], "output": r["output"], "context": r["context"]} for r in rows]
        run = judge.evaluate(items, [evaluator], batch_size=batch_size)
        if engine is not None:
            engine.update(judge.describe())
    finally:
        judge.close()
    out = []
    for r, res in zip(rows, run.results, strict=True):
        result = res.results[evaluator.split("@")[0]]
        if result.status != "ok":
            raise RuntimeError(f"{r['id']}: {result.status} {result.reason}")
        for d, gold, chunk in zip(result.details, r["gold"]["per_chunk"], r["context"], strict=True):
            out.append({"item": r["id"], "gold": gold, "chars": len(chunk), "features": dict(d.x_features or {})})
    return out


def fit(evaluator: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The fitted block (as the catalogue writes it) and the cross-validated figures."""
    names = FITS[evaluator]["features"]
    x = np.array([[r["features"][n] for n in names] for r in rows])
    y = np.array([r["gold"] for r in rows])
    source = f"scikit-learn fit of {len(rows)} chunks of {len({r['item'] for r in rows})} {FITS[evaluator]['set']} dev rows (benchmarks/fits/fit_chunk_evaluators.py)"
    if evaluator.startswith("chunk_relevance"):
        y = y.astype(bool)
        model = LogisticRegression(C=1.0, class_weight="balanced", max_iter=5000)
        groups = np.array([r["item"] for r in rows])
        p = cross_val_predict(model, x, y, cv=GroupKFold(5), groups=groups, method="predict_proba")[:, 1]
        model.fit(x, y)
        block = {
            "intercept": round(float(model.intercept_[0]), 4),
            "weights": {n: round(float(w), 4) for n, w in zip(names, model.coef_[0], strict=True)},
            "source": source,
        }
        figures = {
            "cv_per_chunk_auroc": float(roc_auc_score(y, p)),
            "cv_accuracy_at_0.5": float(np.mean((p >= 0.5) == y)),
            "baseline_shorter_auroc": float(roc_auc_score(y, [-r["chars"] for r in rows])),
        }
        return {"combine": block, "cv": figures}
    model = LogisticRegression(C=1.0, max_iter=5000)
    pred = cross_val_predict(model, x, y, cv=StratifiedKFold(5, shuffle=True, random_state=0))
    model.fit(x, y)
    classes = {
        str(k): {
            "intercept": round(float(b), 4),
            "weights": {n: round(float(w), 4) for n, w in zip(names, coef, strict=True)},
            "source": source,
        }
        for k, b, coef in zip(model.classes_, model.intercept_, model.coef_, strict=True)
    }
    figures = {
        "cv_accuracy_3way": float(np.mean(pred == y)),
        "cv_macro_f1": float(f1_score(y, pred, average="macro")),
        "cv_share_supports": float(np.mean(pred == "supports")),
        "gold_share_supports": float(np.mean(y == "supports")),
    }
    return {"classes": classes, "cv": figures}


def shipped_difference(evaluator: str, fitted: dict[str, Any]) -> float:
    """Largest absolute difference between the fitted and the shipped coefficients."""
    from logitjudge.rubrics.registry import default_registry

    defn = default_registry().versions[evaluator]
    if "combine" in fitted:
        assert defn.combine is not None
        pairs = [(fitted["combine"]["intercept"], defn.combine.intercept)]
        pairs += [(w, defn.combine.weights[n]) for n, w in fitted["combine"]["weights"].items()]
    else:
        assert defn.classes is not None
        pairs = []
        for k, c in fitted["classes"].items():
            pairs.append((c["intercept"], defn.classes[k].intercept))
            pairs += [(w, defn.classes[k].weights[n]) for n, w in c["weights"].items()]
    return max(abs(a - b) for a, b in pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evaluator", choices=sorted(FITS), required=True)
    ap.add_argument("--model", default=None, help="model name or path (default: the default model)")
    ap.add_argument("--batch-size", type=int, default=4)
    args = ap.parse_args()
    from logitjudge.settings import MAIN_MODEL

    engine: dict[str, Any] = {}
    rows = chunk_rows(args.evaluator, args.model, args.batch_size, engine)
    fitted = fit(args.evaluator, rows)
    fitted["fitted_for"] = FittedFor.of(engine).model_dump()  # the catalogue's block beside the coefficients
    diff = shipped_difference(args.evaluator, fitted)
    record = {
        "command": " ".join(["python", *sys.argv]),
        "evaluator": args.evaluator,
        "model": args.model or MAIN_MODEL,
        **fitted,
        "largest_difference_from_shipped": diff,
        "rows": rows,
        "metadata": run_metadata(),
    }
    stem = f"fit-{args.evaluator.replace('@', '-v')}-{Path(args.model or MAIN_MODEL).name.lower()}"
    path = RESULTS / f"{stem}.json"
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in fitted.items()}, indent=1))
    print(f"largest difference from the shipped coefficients: {diff:.4f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
