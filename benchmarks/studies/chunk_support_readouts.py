"""Which logit readouts tell a contradicting chunk from a supporting or unrelated one (ANLI)?

    python benchmarks/studies/chunk_support_readouts.py [--model qwen2.5-coder-1.5b] [--set anli] [--rows 40]
        [--seed 1] [--rebuild benchmarks/results/chunk-support-readouts-<model>-<set>.json]

What it answers: before a new ``chunk_support`` version is fitted, does any candidate readout
carry the signal the shipped probes lack? Per row (one premise as the chunk, the hypothesis as
the claim), every candidate is asked over the chunk (``"Passage: <chunk>"``, as the evaluator's
chunk requests) and over the content-free chunk ``"Passage: N/A"`` (Zhao et al. 2021), in one
request each:

| feature | readout |
|---|---|
| ``true``, ``false``, ``consistent`` | the shipped probes of ``chunk_support@2`` (yes/no) |
| ``ct``, ``cf``, ``cn`` | one choice "true / false / neither", in all 3 cyclic rotations |
| ``contradict`` | yes/no "does the passage contradict the claim?" |
| ``both`` | yes/no "can the claim and the passage both be true at the same time?" |
| ``pmi``, ``pmi_false`` | log P(claim \\| chunk) - log P(claim \\| N/A) per claim token (nats), after "write a statement about the passage" / "... that the passage shows to be false" (UPR-style continuation readout) |
| ``pmi_diff`` | ``pmi_false - pmi`` |

A yes/no feature is the logit of P(yes); ``<f>_rel`` subtracts the content-free chunk's; a
choice feature is log P(option). Reported: each feature's AUROC for "contradicts" and for
"supports" (scikit-learn ``roc_auc_score``), and the 5-fold stratified cross-validated 3-way
accuracy and macro-F1 of a multinomial logistic regression on groups of features, beside the
majority-class baseline. The rows are a seeded sample of the set's dev rows outside
``rag_quality.py``'s default sample (seed 0, 45 rows) and outside ``rag-fit-rows.json``, so a
readout chosen here is still measured held-out there. Writes
``benchmarks/results/chunk-support-readouts-<model>-<set>.json`` (raw answers per row and the
figures) and prints the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score, roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict

from logitjudge.rubrics.scoring import clipped_logit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other chunk_support studies
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
sys.path.insert(2, str(Path(__file__).resolve().parents[1] / "quality"))  # rag_quality
from _results import RESULTS, run_metadata  # noqa: E402
from rag_quality import load_rows  # noqa: E402

LABELS = ("supports", "contradicts", "unrelated")
NOULS = ("true", "false", "consistent", "contradict", "both")
GROUPS = {
    "shipped probes (v2)": ["true_rel", "false_rel", "consistent_rel"],
    "shipped probes, raw and relative": ["true", "false", "consistent", "true_rel", "false_rel", "consistent_rel"],
    "choice": ["ct_rel", "cf_rel", "cn_rel"],
    "new yes/no": ["contradict", "both", "contradict_rel", "both_rel"],
    "probes + choice + PMI": [
        "ct_rel",
        "cf_rel",
        "cn_rel",
        "true_rel",
        "false_rel",
        "consistent_rel",
        "pmi",
        "pmi_diff",
    ],
}


def questions(claim: str) -> list[Any]:
    """The candidate questions about ``claim``, in the order of :data:`NOULS` then choice, then
    the two continuations."""
    from logitjudge.engine.types import Option, Question

    def noul(text: str) -> Question:
        return Question("noul", text, (Option("true"), Option("false")), calibrated=False)

    c = json.dumps(claim, ensure_ascii=False)
    return [
        noul(f"Does the passage in the state show that the claim {c} is true?"),
        noul(f"Does the passage in the state show that the claim {c} is false?"),
        noul(f"Is the claim {c} consistent with the passage in the state?"),
        noul(f"Does the passage in the state contradict the claim {c}?"),
        noul(f"Can the claim {c} and the passage in the state both be true at the same time?"),
        Question(
            "choice",
            f"Based only on the passage in the state, is the claim {c} true, false, or neither (the passage does not say)?",
            (
                Option("true", "the passage shows the claim is true"),
                Option("false", "the passage shows the claim is false"),
                Option("neither", "the passage does not show whether the claim is true or false"),
            ),
            rotations=3,
            calibrated=False,
        ),
        Question(
            "continuation", "Write a statement about the passage in the state.", (Option(claim),), calibrated=False
        ),
        Question(
            "continuation",
            "Write a statement that the passage in the state shows to be false.",
            (Option(claim),),
            calibrated=False,
        ),
    ]


def raw_answers(model: str | None, rows: list[dict[str, Any]], batch: int = 8) -> list[dict[str, Any]]:
    """Per row: ``{"chunk": ..., "null": ...}``, each the answers by feature name (a distribution,
    or ``[log P(text), tokens]`` for a continuation)."""
    from logitjudge import Judge
    from logitjudge.engine.types import EngineRequest
    from logitjudge.rubrics.questions import chunk_state

    names = [*NOULS, "choice", "lik", "lik_false"]
    judge = Judge.load(model)
    try:
        requests = [
            EngineRequest(chunk_state(chunk), tuple(questions(r["output"])))
            for r in rows
            for chunk in (r["context"][0], "N/A")
        ]
        results = []
        for i in range(0, len(requests), batch):
            for res in judge.run_batch(requests[i : i + batch]):
                if isinstance(res, Exception):
                    raise res
                results.append(
                    {
                        n: [a.log_likelihood, a.tokens] if a.type == "continuation" else list(a.probabilities)
                        for n, a in zip(names, res.answers, strict=True)
                    }
                )
    finally:
        judge.close()
    return [{"chunk": results[2 * k], "null": results[2 * k + 1]} for k in range(len(rows))]


def _logit(p: float) -> float:
    return clipped_logit(p, eps=1e-9)


def features(raw: dict[str, Any]) -> dict[str, float]:
    """The table's features of one row's raw answers."""
    c, n = raw["chunk"], raw["null"]
    f: dict[str, float] = {}
    for k in NOULS:
        f[k] = _logit(c[k][0])
        f[f"{k}_rel"] = f[k] - _logit(n[k][0])
    for j, o in enumerate(("ct", "cf", "cn")):
        f[o] = float(np.log(max(c["choice"][j], 1e-9)))
        f[f"{o}_rel"] = f[o] - float(np.log(max(n["choice"][j], 1e-9)))
    tokens = c["lik"][1]
    f["pmi"] = (c["lik"][0] - n["lik"][0]) / tokens
    f["pmi_false"] = (c["lik_false"][0] - n["lik_false"][0]) / tokens
    f["pmi_diff"] = f["pmi_false"] - f["pmi"]
    return f


def figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    """AUROC per feature, CV accuracy / macro-F1 per group, majority baseline."""
    feats = [features(r["raw"]) for r in records]
    y = np.array([LABELS.index(r["gold"]) for r in records])
    out: dict[str, Any] = {
        "n": len(records),
        "gold_counts": {lab: int((y == k).sum()) for k, lab in enumerate(LABELS)},
        "baseline_majority_accuracy": float(np.bincount(y, minlength=3).max() / len(y)),
        "auroc": {
            name: {
                "contradicts": float(roc_auc_score(y == 1, [f[name] for f in feats])),
                "supports": float(roc_auc_score(y == 0, [f[name] for f in feats])),
            }
            for name in feats[0]
        },
        "cv": {},
    }
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    for group, names in GROUPS.items():
        x = np.array([[f[n] for n in names] for f in feats])
        for c in (0.1, 1.0):
            pred = cross_val_predict(LogisticRegression(C=c, max_iter=5000), x, y, cv=folds)
            out["cv"][f"{group}, C={c}"] = {
                "accuracy_3way": float((pred == y).mean()),
                "macro_f1": float(f1_score(y, pred, average="macro")),
                "share_supports": float((pred == 0).mean()),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model name or path (default: the default model)")
    ap.add_argument("--set", default="anli", choices=("anli", "vitaminc"))
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rebuild", type=Path, help="recompute the figures of a result file (no model)")
    args = ap.parse_args()
    if args.rebuild:
        record = json.loads(args.rebuild.read_text(encoding="utf-8"))
        path = args.rebuild
    else:
        from logitjudge.settings import MAIN_MODEL

        model = args.model or MAIN_MODEL
        bench = {r["id"] for r in load_rows(args.set, 45, 0)}
        fitted = json.loads((RESULTS / "rag-fit-rows.json").read_text(encoding="utf-8"))["ids"].get(args.set, [])
        rows = [r for r in load_rows(args.set, None, 0) if r["id"] not in bench and r["id"] not in set(fitted)]
        random.Random(args.seed).shuffle(rows)
        rows = rows[: args.rows]
        start = time.perf_counter()
        raw = raw_answers(model, rows)
        record = {
            "command": "python benchmarks/studies/chunk_support_readouts.py " + " ".join(sys.argv[1:]),
            "model": model,
            "set": args.set,
            "metadata": run_metadata(),
            "seconds": time.perf_counter() - start,
            "rows": [{"id": r["id"], "gold": r["gold"]["label"], "raw": a} for r, a in zip(rows, raw, strict=True)],
        }
        path = RESULTS / f"chunk-support-readouts-{Path(model).name.lower()}-{args.set}.json"
    record["figures"] = figures(record["rows"])
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(record["figures"], indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
