"""Does any yes/no wording, or a per-word likelihood contrast, tell a contradicting chunk apart?

    python benchmarks/studies/chunk_support_wordings.py [--model qwen2.5-coder-1.5b] [--batch 8]
    python benchmarks/studies/chunk_support_wordings.py --rebuild   # figures again from the saved answers

What it answers: ``chunk_support``'s probes (yes/no "does the passage show the claim true /
false", "is the claim consistent with it", each relative to the content-free chunk ``N/A``) call
an explicit contradiction "unrelated". Is that the wording, or the model? Per row (a claim and one
chunk), asked over the chunk (``"Passage: <chunk>"``, as the evaluator's chunk requests) and over
``"Passage: N/A"`` (Zhao et al. 2021):

- the 10 yes/no wordings of :data:`WORDINGS` (the shipped three, and "about the same subject",
  "disagree", "contradict", "says something different", "wrong if the passage is correct",
  "must also be correct", "mentions"); a feature is the logit of P(yes), ``<w>_rel`` that minus
  the content-free chunk's;
- the claim's per-word log-likelihood after "Write a statement about the passage in the state."
  (the engine's continuation readout on each word prefix of the claim; word ``k``'s log-prob is
  the difference of two prefixes), and its PMI per word against the content-free chunk: a
  contradiction should show one word the chunk makes much less likely (``pmi_min``) among words it
  makes more likely (``pmi_mean``).

Rows: the 12 hand-written claim/chunk cases of :data:`CONTRASTS` (3 supports, 6 contradicts,
3 unrelated: explicit, everyday contradictions, not the pages' examples), the 60 VitaminC dev rows
``chunk_support@3`` was fitted on (``rag-fit-rows.json``; VitaminC's "unrelated" is "not enough
info", on topic), and 30 off-topic pairs derived from other VitaminC rows (a claim with another
row's evidence; "unrelated" by construction; the per-word readout uses the first 15). Reported:
each feature's AUROC for contradicts (and supports) against the rest on VitaminC, for unrelated
against the rest on VitaminC plus the off-topic pairs, and its mean per gold label on the
hand-written cases; and 5-fold cross-validated 3-way accuracy and macro-F1 (VitaminC rows) of a
multinomial logistic regression of groups of the yes/no features, fitted on VitaminC plus the
off-topic pairs, with its predictions on the hand-written cases. Writes
``benchmarks/results/chunk-support-wordings-<model>.json`` (answers and figures).
"""

from __future__ import annotations

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
from _results import RESULTS, answers_parser, answers_record  # noqa: E402
from rag_quality import load_rows  # noqa: E402

LABELS = ("supports", "contradicts", "unrelated")
WORDINGS = {
    "true": "Does the passage in the state show that the claim {c} is true?",
    "false": "Does the passage in the state show that the claim {c} is false?",
    "consistent": "Is the claim {c} consistent with the passage in the state?",
    "about": "Is the passage in the state about the same subject as the claim {c}?",
    "disagree": "Does the passage in the state disagree with the claim {c}?",
    "contradict": "Does the passage in the state contradict the claim {c}?",
    "differs": "Does the passage in the state say something different from the claim {c} about the same thing?",
    "wrong": "If the passage in the state is correct, is the claim {c} wrong?",
    "implies": "If the passage in the state is correct, must the claim {c} also be correct?",
    "mentions": "Does the passage in the state mention what the claim {c} is about?",
}
CONTINUATION = "Write a statement about the passage in the state."
CONTRASTS = [
    ("Output tokens are free.", "Output tokens are billed at $8 per million tokens.", "contradicts"),
    ("Output tokens are free.", "Output tokens are free of charge.", "supports"),
    ("The museum opens at 9 am.", "Opening hours: the museum opens at 10 am daily.", "contradicts"),
    ("The museum opens at 9 am.", "The museum cafe serves vegan food.", "unrelated"),
    ("The museum opens at 9 am.", "Doors open at 9:00 every morning.", "supports"),
    ("Alice was born in Canada.", "Alice was born and raised in Mexico City.", "contradicts"),
    ("Alice was born in Canada.", "The stock market fell 3% on Monday.", "unrelated"),
    ("The river is 300 km long.", "The river stretches for 300 kilometres.", "supports"),
    ("The river is 300 km long.", "At 1,200 km, the river is one of the longest in the region.", "contradicts"),
    ("The library is closed on Sundays.", "The library is open seven days a week, including Sundays.", "contradicts"),
    ("The library is closed on Sundays.", "Parking is available behind the building.", "unrelated"),
    ("The app supports dark mode.", "Dark mode is not available in the app.", "contradicts"),
]
GROUPS = {
    "shipped probes (relative)": ["true_rel", "false_rel", "consistent_rel"],
    "shipped probes + about": ["true_rel", "false_rel", "consistent_rel", "about", "about_rel"],
    "all ten, relative": [f"{w}_rel" for w in WORDINGS],
    "all ten, raw and relative": [f"{w}{s}" for w in WORDINGS for s in ("", "_rel")],
}
WORD_ROWS_OFF_TOPIC = 15


def rows_of() -> list[dict[str, Any]]:
    """The hand-written cases, the fitted VitaminC rows and the derived off-topic pairs."""
    vit = load_rows("vitaminc", None, 0)
    fitted = set(json.loads((RESULTS / "rag-fit-rows.json").read_text(encoding="utf-8"))["ids"]["vitaminc"])
    others = [r for r in vit if r["id"] not in fitted]
    random.Random(3).shuffle(others)
    off = [
        {"id": f"off:{a['id']}:{b['id']}", "output": a["output"], "context": b["context"], "gold": "unrelated"}
        for a, b in ((others[2 * k], others[2 * k + 1]) for k in range(30))
    ]
    hand = [{"id": f"hand:{i}", "output": c, "context": [p], "gold": g} for i, (c, p, g) in enumerate(CONTRASTS)]
    vitaminc = [dict(r, gold=r["gold"]["per_chunk"][0]) for r in vit if r["id"] in fitted]
    return hand + vitaminc + off


def answers_of(model: str | None, rows: list[dict[str, Any]], batch: int) -> list[dict[str, Any]]:
    """Per row: the yes/no answers ``{wording: [P(yes), P(no)]}`` and the cumulative word-prefix
    log-likelihoods, over the chunk and over ``N/A``."""
    from logitjudge import Judge
    from logitjudge.engine.types import EngineRequest, Option, Question
    from logitjudge.rubrics.questions import chunk_state

    def questions(row: dict[str, Any]) -> tuple[Question, ...]:
        c = json.dumps(row["output"], ensure_ascii=False)
        nouls = [
            Question("noul", t.format(c=c), (Option("true"), Option("false")), calibrated=False)
            for t in WORDINGS.values()
        ]
        if row["id"].startswith("off:") and int(row["_k"]) >= WORD_ROWS_OFF_TOPIC:
            return tuple(nouls)
        words = row["output"].split()
        prefixes = [" ".join(words[: k + 1]) for k in range(len(words))]
        return tuple(nouls) + tuple(
            Question("continuation", CONTINUATION, (Option(p),), calibrated=False) for p in prefixes
        )

    off = 0
    for r in rows:
        if r["id"].startswith("off:"):
            r["_k"], off = off, off + 1
    judge = Judge.load(model)
    try:
        requests = [EngineRequest(chunk_state(ch), questions(r)) for r in rows for ch in (r["context"][0], "N/A")]
        got = []
        started = time.time()
        for i in range(0, len(requests), batch):
            for res in judge.run_batch(requests[i : i + batch]):
                if isinstance(res, Exception):
                    raise res
                got.append(res.answers)
            print(
                f"{min(i + batch, len(requests))}/{len(requests)} requests, {time.time() - started:.0f} s", flush=True
            )
    finally:
        judge.close()
    out = []
    for k, r in enumerate(rows):
        entry: dict[str, Any] = {"id": r["id"], "gold": r["gold"], "claim": r["output"]}
        for side, answers in (("chunk", got[2 * k]), ("null", got[2 * k + 1])):
            entry[side] = dict(zip(WORDINGS, (list(a.probabilities) for a in answers[: len(WORDINGS)]), strict=True))
            entry[f"{side}_prefix_loglik"] = [a.log_likelihood for a in answers[len(WORDINGS) :]]
        out.append(entry)
    return out


def features(row: dict[str, Any]) -> dict[str, float]:
    """The yes/no features, and the per-word PMI features where the row has its prefixes."""
    f: dict[str, float] = {}
    for w in WORDINGS:
        f[w] = clipped_logit(row["chunk"][w][0])
        f[f"{w}_rel"] = f[w] - clipped_logit(row["null"][w][0])
    if row.get("chunk_prefix_loglik"):
        pmi = np.diff(np.r_[0.0, row["chunk_prefix_loglik"]]) - np.diff(np.r_[0.0, row["null_prefix_loglik"]])
        f.update(pmi_mean=float(pmi.mean()), pmi_min=float(pmi.min()), pmi_min_minus_mean=float(pmi.min() - pmi.mean()))
    return f


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The module docstring's figures."""
    for r in rows:
        r["f"] = features(r)
    hand = [r for r in rows if r["id"].startswith("hand:")]
    vit = [r for r in rows if r["id"].startswith("vitaminc:")]
    both = vit + [r for r in rows if r["id"].startswith("off:")]
    names = sorted({n for r in rows for n in r["f"]}, key=lambda n: (n.startswith("pmi"), n))
    per_feature = {}
    for n in names:
        v = [r for r in vit if n in r["f"]]
        b = [r for r in both if n in r["f"]]
        per_feature[n] = {
            "auroc_contradicts_vitaminc": roc_auc_score(
                [r["gold"] == "contradicts" for r in v], [r["f"][n] for r in v]
            ),
            "auroc_supports_vitaminc": roc_auc_score([r["gold"] == "supports" for r in v], [r["f"][n] for r in v]),
            "auroc_unrelated_vitaminc_and_off_topic": roc_auc_score(
                [r["gold"] == "unrelated" for r in b], [r["f"][n] for r in b]
            ),
            "hand_mean_by_gold": {g: float(np.mean([r["f"][n] for r in hand if r["gold"] == g])) for g in LABELS},
        }
    cv = {}
    y = np.array([r["gold"] for r in both])
    is_vit = np.array([r["id"].startswith("vitaminc:") for r in both])
    for group, cols in GROUPS.items():
        x = np.array([[r["f"][c] for c in cols] for r in both])
        for c in (0.1, 1.0):
            model = LogisticRegression(C=c, max_iter=5000)
            pred = cross_val_predict(model, x, y, cv=StratifiedKFold(5, shuffle=True, random_state=0))
            on_hand = model.fit(x, y).predict(np.array([[r["f"][k] for k in cols] for r in hand]))
            cv[f"{group}, C={c}"] = {
                "accuracy_3way_vitaminc": float(np.mean(pred[is_vit] == y[is_vit])),
                "macro_f1_vitaminc": float(f1_score(y[is_vit], pred[is_vit], average="macro")),
                "hand_accuracy": float(np.mean([p == r["gold"] for p, r in zip(on_hand, hand, strict=True)])),
                "hand_predicted": [str(p) for p in on_hand],
            }
    return {
        "n": {"hand": len(hand), "vitaminc": len(vit), "off_topic": len(both) - len(vit)},
        "vitaminc_gold_counts": {g: sum(r["gold"] == g for r in vit) for g in LABELS},
        "hand_gold": [r["gold"] for r in hand],
        "per_feature": per_feature,
        "cv": cv,
    }


def main() -> None:
    args = answers_parser(__doc__.split("\n\n")[0]).parse_args()
    record, path = answers_record(__file__, args, lambda: answers_of(args.model, rows_of(), args.batch))
    record["figures"] = figures([dict(r) for r in record["rows"]])
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    fig = record["figures"]
    print(f"{'feature':22s} AUROC C  AUROC S  AUROC U | hand mean S / C / U")
    for n, v in fig["per_feature"].items():
        means = " / ".join(f"{v['hand_mean_by_gold'][g]:+.2f}" for g in LABELS)
        print(
            f"{n:22s} {v['auroc_contradicts_vitaminc']:.2f}     {v['auroc_supports_vitaminc']:.2f}     "
            f"{v['auroc_unrelated_vitaminc_and_off_topic']:.2f}   | {means}"
        )
    for k, v in fig["cv"].items():
        print(
            f"{k}: VitaminC 3-way {v['accuracy_3way_vitaminc']:.2f}, macro-F1 {v['macro_f1_vitaminc']:.2f}; "
            f"hand-written {v['hand_accuracy']:.2f}"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
