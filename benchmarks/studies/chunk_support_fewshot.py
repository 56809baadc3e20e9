"""Do worked examples in the prefix, or a plainer rotated choice, give chunk support polarity?

    python benchmarks/studies/chunk_support_fewshot.py [--model qwen2.5-coder-1.5b] [--batch 8]
    python benchmarks/studies/chunk_support_fewshot.py --rebuild   # figures again from the saved answers

What it answers: ``chunk_support@3`` (three yes/no probes, a fitted logistic) reaches VitaminC's
targets but not ANLI's (3-way 0.40, "supports" for 69% against a gold 38%), and it calls an
explicit contradiction "unrelated". Its wording study (``chunk_support_wordings.py``) found no
yes/no wording whose P(yes) tells a contradiction apart. This one tries the two ideas that study
did not: **few-shot demonstrations in the prefix** (Brown et al. 2020, "Language Models are
Few-Shot Learners") and a **rotated three-way choice** whose options say what each label means
("shows that the claim is true / false / neither"), so its order prior cancels (the engine's
cyclic rotations; Zheng et al. 2024, "Large Language Models Are Not Robust Multiple Choice
Selectors").

Two states per row, each asked the same three questions in one request:

- ``zero``: ``"Passage: <chunk>"``, the evaluator's own chunk state;
- ``few``: :data:`DEMONSTRATIONS` (6 hand-written worked examples, 2 per label, on invented
  topics; none is from a data set or a page), then ``"Passage: <chunk>"``. The demonstrations are
  the start of the state, so in a real evaluator they would be a prefix shared by every chunk.

Questions: the rotated choice (:data:`OPTIONS`, 3 rotations, averaged), and the yes/no probes
"does the passage show that the claim is true" / "... false" (read as ``logit P(yes | false) -
logit P(yes | true)`` for contradicts).

Rows: ANLI's benchmark sample (45 rows, seed 0, the rows the RAG table reports ``chunk_support``
on: v3 scores 0.40 there), 45 held-out VitaminC rows (seed 0, less the rows ``chunk_support@3``
was fitted on), the 12 hand-written claim/chunk cases of ``chunk_support_wordings.CONTRASTS`` and
the chunk support page's three chunks, each with each of the output's two claims (the evaluator
judges a chunk by the claim it speaks to most; here every pair is scored, gold being the chunk's
label). Reported per set and state: 3-way accuracy and macro-F1 of the choice's argmax, share
"supports" (and gold's), the one-vs-rest AUROC of P(contradicts) and of the false-minus-true
probe contrast for contradicts, with 95% bootstrap intervals over rows for ANLI and VitaminC;
and :func:`refit`: the same answers combined by a logistic regression fitted on the VitaminC
rows (as ``chunk_support@3``'s coefficients were fitted on VitaminC), applied to the rest. Writes ``benchmarks/results/chunk-support-fewshot-<model>.json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import f1_score, roc_auc_score

from logitjudge.rubrics.samples import bootstrap_interval
from logitjudge.rubrics.scoring import clipped_logit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other chunk_support studies
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
sys.path.insert(2, str(Path(__file__).resolve().parents[1] / "quality"))  # rag_quality
from _results import RESULTS, answers_parser, answers_path, answers_record, run_metadata  # noqa: E402
from chunk_support_wordings import CONTRASTS, LABELS  # noqa: E402
from rag_quality import load_rows  # noqa: E402

DEMONSTRATIONS = """Worked examples: how a claim relates to a passage.

Passage: "The Willow Creek bridge was completed in 1932 and carries two lanes of traffic over the river."
Claim: "The bridge was finished in the 1930s." -> supports (the passage says 1932)
Claim: "The bridge carries four lanes of traffic." -> contradicts (the passage says two lanes)
Claim: "The bridge was designed by a local engineer." -> unrelated (the passage does not say who designed it)

Passage: "Marta grew up on a farm in Portugal and moved to Lisbon at eighteen to study law."
Claim: "Marta has never lived in a city." -> contradicts (she moved to Lisbon)
Claim: "Marta went to university in Portugal's capital." -> supports (she moved to Lisbon to study law)
Claim: "Marta later became a judge." -> unrelated (the passage does not say what she did after)

The passage to judge now:
"""
OPTIONS = (
    ("supports", "The passage shows that the claim is true"),
    ("contradicts", "The passage shows that the claim is false"),
    ("unrelated", "The passage neither shows the claim true nor shows it false"),
)
PAGE_OUTPUT_CLAIMS = ("Jev is billed per input token at $0.042 per million", "output tokens are free.")
PAGE_CHUNKS = (
    ("Price: $42 per billion input tokens. Output tokens are free.", "supports"),
    ("Founded in 2024.", "unrelated"),
    ("Output billed at $8/M on the legacy v0 endpoint.", "contradicts"),
)
STATES = ("zero", "few")
SETS = ("anli", "vitaminc", "hand", "page")


def rows_of() -> list[dict[str, Any]]:
    """The rows of the module docstring: ``{id, set, claim, chunk, gold}``."""
    fitted = frozenset(json.loads((RESULTS / "rag-fit-rows.json").read_text(encoding="utf-8"))["ids"]["vitaminc"])
    rows = []
    for name, exclude in (("anli", frozenset()), ("vitaminc", fitted)):
        for r in load_rows(name, 45, 0, exclude=exclude):
            rows.append(
                {
                    "id": r["id"],
                    "set": name,
                    "claim": r["output"],
                    "chunk": r["context"][0],
                    "gold": r["gold"]["per_chunk"][0],
                }
            )
    for r in load_rows("vitaminc", None, 0):  # the 60 rows chunk_support@3 was fitted on
        if r["id"] in fitted:
            rows.append(
                {
                    "id": r["id"],
                    "set": "vitaminc_fit",
                    "claim": r["output"],
                    "chunk": r["context"][0],
                    "gold": r["gold"]["per_chunk"][0],
                }
            )
    for i, (claim, chunk, gold) in enumerate(CONTRASTS):
        rows.append({"id": f"hand:{i}", "set": "hand", "claim": claim, "chunk": chunk, "gold": gold})
    for k, (chunk, gold) in enumerate(PAGE_CHUNKS):
        for j, claim in enumerate(PAGE_OUTPUT_CLAIMS):
            rows.append({"id": f"page:{k}:{j}", "set": "page", "claim": claim, "chunk": chunk, "gold": gold})
    return rows


def answers_of(model: str | None, rows: list[dict[str, Any]], batch: int) -> None:
    """Adds ``row[state] = [choice P(supports, contradicts, unrelated), P(yes|true) pair, P(yes|false) pair]``."""
    from logitjudge import Judge
    from logitjudge.engine.types import EngineRequest, Option, Question
    from logitjudge.rubrics.questions import chunk_state

    def questions(claim: str) -> tuple[Question, ...]:
        c = json.dumps(claim, ensure_ascii=False)
        yes_no = (Option("true"), Option("false"))
        return (
            Question(
                "choice",
                f"How does the passage relate to the claim {c}?",
                tuple(Option(n, d) for n, d in OPTIONS),
                calibrated=False,
                rotations=len(OPTIONS),
            ),
            Question(
                "noul", f"Does the passage in the state show that the claim {c} is true?", yes_no, calibrated=False
            ),
            Question(
                "noul", f"Does the passage in the state show that the claim {c} is false?", yes_no, calibrated=False
            ),
        )

    def state(kind: str, chunk: str) -> str:
        return chunk_state(chunk) if kind == "zero" else DEMONSTRATIONS + chunk_state(chunk)

    requests = [EngineRequest(state(s, r["chunk"]), questions(r["claim"])) for r in rows for s in STATES]
    judge = Judge.load(model)
    got: list[list[list[float]]] = []
    started = time.time()
    try:
        for i in range(0, len(requests), batch):
            for res in judge.run_batch(requests[i : i + batch]):
                if isinstance(res, Exception):
                    raise res
                got.append([list(a.probabilities) for a in res.answers])
            print(
                f"{min(i + batch, len(requests))}/{len(requests)} requests, {time.time() - started:.0f} s", flush=True
            )
    finally:
        judge.close()
    for k, r in enumerate(rows):
        for v, s in enumerate(STATES):
            r[s] = got[len(STATES) * k + v]


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The module docstring's figures, per set and state."""
    out: dict[str, Any] = {}
    for name in SETS:
        rs = [r for r in rows if r["set"] == name]
        gold = np.array([r["gold"] for r in rs])
        ids = [r["id"] for r in rs]
        is_c = gold == "contradicts"
        for s in STATES:
            choice = np.array([r[s][0] for r in rs])
            pred = np.array([LABELS[int(k)] for k in choice.argmax(axis=1)])
            contrast = np.array([clipped_logit(r[s][2][0]) - clipped_logit(r[s][1][0]) for r in rs])
            fig: dict[str, Any] = {
                "n": len(rs),
                "accuracy_3way": float(np.mean(pred == gold)),
                "macro_f1": float(f1_score(gold, pred, labels=list(LABELS), average="macro", zero_division=0)),
                "share_supports": float(np.mean(pred == "supports")),
                "gold_share_supports": float(np.mean(gold == "supports")),
                "predicted": [str(p) for p in pred] if name in ("hand", "page") else None,
            }
            if is_c.any() and not is_c.all():
                fig["auroc_contradicts_choice"] = float(roc_auc_score(is_c, choice[:, 1]))
                fig["auroc_contradicts_false_minus_true"] = float(roc_auc_score(is_c, contrast))
            if name in ("anli", "vitaminc"):
                fig["accuracy_3way_interval"] = bootstrap_interval(
                    lambda idx, pred=pred, gold=gold: float(np.mean(pred[idx] == gold[idx])), ids
                )
                fig["auroc_contradicts_choice_interval"] = bootstrap_interval(
                    lambda idx, is_c=is_c, choice=choice: (
                        float(roc_auc_score(is_c[idx], choice[idx, 1])) if 0 < is_c[idx].sum() < len(idx) else None
                    ),
                    ids,
                )
            out[f"{name}/{s}"] = fig
    out["refit"] = refit(rows)
    return out


REFIT_FEATURES = {
    "choice": lambda a: list(np.log(np.clip(a[0], 1e-6, 1.0))),
    "probes": lambda a: [clipped_logit(a[1][0]), clipped_logit(a[2][0])],
    "choice+probes": lambda a: (
        list(np.log(np.clip(a[0], 1e-6, 1.0))) + [clipped_logit(a[1][0]), clipped_logit(a[2][0])]
    ),
}
"""Feature groups of :func:`refit`: the choice's log-probabilities, the two probes' logit P(yes)."""


def refit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Would a fitted combination use these answers? Per state and feature group
    (:data:`REFIT_FEATURES`), a multinomial logistic regression (scikit-learn, C=1) of the gold
    labels: 5-fold cross-validated on the held-out VitaminC rows (``vitaminc_cv_*``), and fitted
    on the 60 VitaminC rows ``chunk_support@3`` was fitted on (``vitaminc_fit``, when the run has
    them; else on the held-out rows themselves, which are then no longer held out), applied to
    the held-out VitaminC rows, ANLI, the hand-written cases and the page's pairs."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    by_set = {n: [r for r in rows if r["set"] == n] for n in (*SETS, "vitaminc_fit")}
    out: dict[str, Any] = {}
    for s in STATES:
        for group, feats in REFIT_FEATURES.items():
            x = np.array([feats(r[s]) for r in by_set["vitaminc"]])
            y = np.array([r["gold"] for r in by_set["vitaminc"]])
            model = LogisticRegression(C=1.0, max_iter=5000)
            oof = cross_val_predict(model, x, y, cv=StratifiedKFold(5, shuffle=True, random_state=0))
            fig: dict[str, Any] = {
                "vitaminc_cv_accuracy_3way": float(np.mean(oof == y)),
                "vitaminc_cv_macro_f1": float(f1_score(y, oof, labels=list(LABELS), average="macro", zero_division=0)),
            }
            fit = by_set["vitaminc_fit"] or by_set["vitaminc"]
            model.fit(np.array([feats(r[s]) for r in fit]), np.array([r["gold"] for r in fit]))
            fig["fitted_on"] = f"{fit[0]['set']} ({len(fit)} rows)"
            for name in ("vitaminc", "anli", "hand", "page") if by_set["vitaminc_fit"] else ("anli", "hand", "page"):
                gold = np.array([r["gold"] for r in by_set[name]])
                pred = model.predict(np.array([feats(r[s]) for r in by_set[name]]))
                fig[f"{name}_accuracy_3way"] = float(np.mean(pred == gold))
                if name in ("anli", "vitaminc"):
                    fig[f"{name}_macro_f1"] = float(
                        f1_score(gold, pred, labels=list(LABELS), average="macro", zero_division=0)
                    )
                    fig[f"{name}_share_supports"] = float(np.mean(pred == "supports"))
                    fig[f"{name}_accuracy_3way_interval"] = bootstrap_interval(
                        lambda idx, pred=pred, gold=gold: float(np.mean(pred[idx] == gold[idx])),
                        [r["id"] for r in by_set[name]],
                    )
                else:
                    fig[f"{name}_predicted"] = [str(p) for p in pred]
            out[f"{s}/{group}"] = fig
    return out


def main() -> None:
    ap = answers_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--resume", action="store_true", help="keep the saved answers, ask only the rows they lack")
    args = ap.parse_args()

    def answer() -> list[dict[str, Any]]:
        rows = rows_of()
        answers_of(args.model, rows, args.batch)
        return rows

    if args.resume:
        path = answers_path(__file__, args.model)
        record = json.loads(path.read_text(encoding="utf-8"))
        saved = {r["id"]: r for r in record["rows"]}
        rows = rows_of()
        todo = [r for r in rows if r["id"] not in saved]
        started = time.time()
        if todo:
            answers_of(args.model, todo, args.batch)
        saved.update({r["id"]: r for r in todo})
        record["rows"] = [saved[r["id"]] for r in rows]
        record["seconds"] = round(record["seconds"] + time.time() - started, 1)
        record["resumed"] = {"rows_added": len(todo), "metadata": run_metadata()}
    else:
        record, path = answers_record(__file__, args, answer)
    record["figures"] = figures(record["rows"])
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"{'set/state':16s}   n  3-way  macro-F1  supports (gold)  AUROC contradicts: choice / false-true")
    for key, f in record["figures"].items():
        if key == "refit":
            continue
        auc = f.get("auroc_contradicts_choice")
        auc_s = "" if auc is None else f"{auc:.2f} / {f['auroc_contradicts_false_minus_true']:.2f}"
        print(
            f"{key:16s} {f['n']:3d}  {f['accuracy_3way']:.2f}   {f['macro_f1']:.2f}      "
            f"{f['share_supports']:.2f} ({f['gold_share_supports']:.2f})      {auc_s}"
        )
    print(
        "refit on VitaminC (state/features): VitaminC CV 3-way, macro-F1 | ANLI 3-way, macro-F1, supports | hand, page"
    )
    for key, f in record["figures"]["refit"].items():
        held = (
            f"held-out VitaminC {f['vitaminc_accuracy_3way']:.2f} {f['vitaminc_macro_f1']:.2f} "
            f"{f['vitaminc_share_supports']:.2f} | "
            if "vitaminc_accuracy_3way" in f
            else ""
        )
        print(
            f"  {key:20s} [{f['fitted_on']}] {held}{f['vitaminc_cv_accuracy_3way']:.2f} {f['vitaminc_cv_macro_f1']:.2f} | "
            f"{f['anli_accuracy_3way']:.2f} {f['anli_macro_f1']:.2f} {f['anli_share_supports']:.2f} | "
            f"{f['hand_accuracy_3way']:.2f} {f['page_accuracy_3way']:.2f}"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
