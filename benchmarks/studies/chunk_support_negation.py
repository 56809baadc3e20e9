"""Does asking about the claim's negation cancel chunk support's relatedness bias?

    python benchmarks/studies/chunk_support_negation.py [--model qwen2.5-coder-1.5b] [--batch 8]
    python benchmarks/studies/chunk_support_negation.py --rebuild   # figures again from the saved answers

What it answers: the default model's yes/no probes read whether a passage is *about* a claim,
not whether it shows the claim true or false (``chunk_support_wordings.py``,
``chunk_support_fewshot.py``): "does the passage show that the claim is true?" and "... false?"
both rise with relatedness. Relatedness is the same for a claim and its negation, polarity is
opposite, so the difference of one probe asked about the claim and about its negation should
cancel the bias and keep the polarity (the contrastive idea of Burns et al. 2023, "Discovering
Latent Knowledge in Language Models Without Supervision", read here from prompted P(yes) rather
than hidden states). The negation is written by rule, ``It is not true that <claim>``, so no
model writes anything.

One request per row, the state being the evaluator's chunk state (``"Passage: <chunk>"``), four yes/no
questions: "does the passage in the state show that the claim X is true?" and "... is false?",
for X the claim and X its negation. Features: ``true``, ``false`` (logit P(yes) about the claim)
and ``true_neg``, ``false_neg`` (about the negation); contrasts ``true - true_neg`` and
``false - false_neg``. Rows: those of ``chunk_support_fewshot.rows_of`` (the RAG table's 45 ANLI
rows, 45 held-out VitaminC rows, the 60 VitaminC rows ``chunk_support@3`` was fitted on, 12
hand-written cases, the chunk support page's pairs). Reported: the one-vs-rest AUROC of each
feature and contrast for "contradicts" and for "supports" per set (as stored, higher = that
label; the docs read "true" and its contrast the other way round, as their questions predict), and a multinomial logistic
regression (scikit-learn, C=1) per feature group, fitted on the 60 VitaminC fit rows and applied
to the held-out VitaminC rows (3-way accuracy with a 95% bootstrap interval, macro-F1, share
"supports"), ANLI (the same) and the hand-written and page rows. Writes
``benchmarks/results/chunk-support-negation-<model>.json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score, roc_auc_score

from logitjudge.rubrics.samples import bootstrap_interval
from logitjudge.rubrics.scoring import clipped_logit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other chunk_support studies
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
sys.path.insert(2, str(Path(__file__).resolve().parents[1] / "quality"))  # rag_quality
from _results import answers_parser, answers_record  # noqa: E402
from chunk_support_fewshot import rows_of  # noqa: E402
from chunk_support_wordings import LABELS  # noqa: E402

PROBES = {
    "true": "Does the passage in the state show that the claim {claim} is true?",
    "false": "Does the passage in the state show that the claim {claim} is false?",
}
GROUPS = {
    "probes": ("true", "false"),
    "contrasts": ("true-neg", "false-neg"),
    "probes+negation": ("true", "false", "true_neg", "false_neg"),
}
"""Feature groups of the fitted combination."""


def negation(claim: str) -> str:
    """The claim's negation by rule: ``It is not true that <claim>`` (its final full stop dropped)."""
    return "It is not true that " + claim.strip().rstrip(".")


def answers_of(model: str | None, rows: list[dict[str, Any]], batch: int) -> None:
    """Adds ``row["features"]``: logit P(yes) of each probe about the claim and its negation."""
    from logitjudge import Judge
    from logitjudge.engine.types import EngineRequest, Option, Question
    from logitjudge.rubrics.questions import chunk_state

    yes_no = (Option("true"), Option("false"))

    def questions(claim: str) -> tuple[Question, ...]:
        return tuple(
            Question("noul", t.replace("{claim}", json.dumps(c, ensure_ascii=False)), yes_no, calibrated=False)
            for c in (claim, negation(claim))
            for t in PROBES.values()
        )

    requests = [EngineRequest(chunk_state(r["chunk"]), questions(r["claim"])) for r in rows]
    judge = Judge.load(model)
    started = time.time()
    try:
        for i in range(0, len(requests), batch):
            for r, res in zip(rows[i : i + batch], judge.run_batch(requests[i : i + batch]), strict=True):
                if isinstance(res, Exception):
                    raise res
                t, f, tn, fn = (clipped_logit(a.probabilities[0]) for a in res.answers)
                r["features"] = {"true": t, "false": f, "true_neg": tn, "false_neg": fn}
            print(f"{min(i + batch, len(requests))}/{len(requests)} rows, {time.time() - started:.0f} s", flush=True)
    finally:
        judge.close()


def feature(row: dict[str, Any], name: str) -> float:
    """A feature or a contrast (``"true-neg"`` = ``true - true_neg``)."""
    f = row["features"]
    if name.endswith("-neg"):
        base = name[: -len("-neg")]
        return f[base] - f[f"{base}_neg"]
    return float(f[name])


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The module docstring's figures."""
    by_set: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_set.setdefault(r["set"], []).append(r)
    out: dict[str, Any] = {"auroc": {}, "fitted": {}}
    names = ("true", "false", "true_neg", "false_neg", "true-neg", "false-neg")
    for s, rs in by_set.items():
        gold = np.array([r["gold"] for r in rs])
        for label in ("contradicts", "supports"):
            hit = gold == label
            if hit.any() and not hit.all():
                out["auroc"][f"{s}/{label}"] = {
                    n: float(roc_auc_score(hit, [feature(r, n) for r in rs])) for n in names
                }
    fit = by_set["vitaminc_fit"]
    for group, feats in GROUPS.items():
        model = LogisticRegression(C=1.0, max_iter=5000)
        model.fit([[feature(r, n) for n in feats] for r in fit], [r["gold"] for r in fit])
        fig: dict[str, Any] = {"fitted_on": f"vitaminc_fit ({len(fit)} rows)"}
        for s in ("vitaminc", "anli", "hand", "page"):
            rs = by_set[s]
            gold = np.array([r["gold"] for r in rs])
            pred = model.predict([[feature(r, n) for n in feats] for r in rs])
            fig[f"{s}_accuracy_3way"] = float(np.mean(pred == gold))
            fig[f"{s}_macro_f1"] = float(f1_score(gold, pred, labels=list(LABELS), average="macro", zero_division=0))
            fig[f"{s}_share_supports"] = float(np.mean(pred == "supports"))
            fig[f"{s}_gold_share_supports"] = float(np.mean(gold == "supports"))
            if s in ("vitaminc", "anli"):
                fig[f"{s}_accuracy_3way_interval"] = bootstrap_interval(
                    lambda idx, pred=pred, gold=gold: float(np.mean(pred[idx] == gold[idx])), [r["id"] for r in rs]
                )
            else:
                fig[f"{s}_predicted"] = [str(p) for p in pred]
        out["fitted"][group] = fig
    return out


def main() -> None:
    args = answers_parser(__doc__.split("\n\n")[0]).parse_args()

    def answer() -> list[dict[str, Any]]:
        rows = [{k: r[k] for k in ("id", "set", "claim", "chunk", "gold")} for r in rows_of()]
        answers_of(args.model, rows, args.batch)
        return rows

    record, path = answers_record(__file__, args, answer)
    record["figures"] = figures(record["rows"])
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print("AUROC (set/label): true false true_neg false_neg true-neg false-neg")
    for key, a in record["figures"]["auroc"].items():
        print(f"  {key:24s} " + " ".join(f"{v:.2f}" for v in a.values()))
    print("fitted on the 60 VitaminC fit rows: 3-way, macro-F1, supports (gold) per set")
    for group, f in record["figures"]["fitted"].items():
        print(
            f"  {group:16s} "
            + " | ".join(
                f"{s} {f[f'{s}_accuracy_3way']:.2f} {f[f'{s}_macro_f1']:.2f} "
                f"{f[f'{s}_share_supports']:.2f} ({f[f'{s}_gold_share_supports']:.2f})"
                for s in ("vitaminc", "anli", "hand", "page")
            )
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
