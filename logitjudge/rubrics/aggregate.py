"""Dataset aggregates per evaluator: counts, mean score, pass rate, and agreement with gold labels.

Gold labels come from an item's ``labels`` / ``context_labels`` (spec B.8) or from the labelled
data sets' ``gold`` object (``shared/data/README.md``), read by :func:`gold_of`:

================== ===================================== =========================================
dataset evaluator  gold                                  compared with
================== ===================================== =========================================
faithfulness       ``gold.faithful``                     ``passed`` (P/R/F1, accuracy, AUROC, ECE)
answer_correctness ``gold.correct``                      ``passed``
context_recall     ``gold.recall`` (1 -> True)           ``passed``
chunk_support      ``gold.per_chunk`` (3-way)            chunk labels (accuracy, macro-F1); item
                                                         ``passed`` against "no chunk contradicts"
any (pairs)        ``gold.pair``, ``gold.preferred_in_pair`` pairwise accuracy: the preferred item
                                                         scores higher (ties count 1/2)
generic_yesno,     ``gold.answer`` (``"unknown"`` is     typed_question's answer (accuracy; MAE of
multiple_choice,   reported apart)                       the expected level for scores)
rating
================== ===================================== =========================================

Positive class: ``passed`` (configurable: ``positive="failed"`` reports failure detection, as
vrash/jeval does). Precision, recall and F1 are scikit-learn's; a zero denominator gives
``value: null`` and a reason, never NaN. Pairwise ranking uses ``x_soft_score`` when present
(chunk_relevance: mean p(relevant)), else ``score``.

Low option mass: where results carry ``x_option_mass`` (the lowest label mass of the
evaluator's answers, see :func:`logitjudge.rubrics.runner.lowest_option_mass`), the metric
``low_option_mass`` is the share of ok results under :data:`logitjudge.settings.LOW_OPTION_MASS`
(lower is better): there the model put almost no probability on the answer labels, and the
renormalised probabilities, hence the scores, rest on almost nothing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict
from sklearn.metrics import accuracy_score, f1_score, precision_recall_fscore_support, roc_auc_score

from logitjudge.contract.evaluate import EvaluatorSummary, Metric
from logitjudge.settings import LOW_OPTION_MASS

__all__ = [
    "Gold",
    "gold_of",
    "summarize",
    "expected_calibration_error",
    "ece_noise_floor",
    "reliability_bins",
    "low_option_mass_metric",
    "DATASET_EVALUATORS",
]

DATASET_EVALUATORS: dict[str, str] = {
    "generic_yesno": "typed_question",
    "multiple_choice": "typed_question",
    "rating": "typed_question",
}
"""Evaluator names used by the labelled data sets that map to another evaluator here."""


class Gold(BaseModel):
    """Gold labels of one item, normalised; stored with each result row so summaries can be
    recomputed from the results file alone."""

    model_config = ConfigDict(extra="forbid")

    passed: dict[str, bool] = {}
    chunks: dict[str, list[str]] = {}
    pair: dict[str, tuple[str, bool]] = {}
    answer: bool | str | int | None = None
    unknown: bool = False

    def is_empty(self) -> bool:
        return not (self.passed or self.chunks or self.pair or self.answer is not None or self.unknown)


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    return None


def gold_of(row: Mapping[str, Any]) -> Gold:
    """Gold labels of an item/dataset row (``evaluator``, ``gold``, ``labels``, ``context_labels``)."""
    out = Gold()
    ev = row.get("evaluator")
    ev = DATASET_EVALUATORS.get(ev, ev) if isinstance(ev, str) else None
    gold = row.get("gold") or {}
    if ev and isinstance(gold, Mapping):
        for key in ("faithful", "correct", "recall"):
            if key in gold and (b := _as_bool(gold[key])) is not None:
                out.passed[ev] = b
        if ev == "chunk_support" and isinstance(gold.get("per_chunk"), list):
            out.chunks[ev] = [str(x) for x in gold["per_chunk"]]
            out.passed[ev] = "contradicts" not in out.chunks[ev]
        if "pair" in gold and isinstance(gold.get("preferred_in_pair"), bool):
            out.pair[ev] = (str(gold["pair"]), gold["preferred_in_pair"])
        if ev == "typed_question" and "answer" in gold:
            if gold.get("unknown") is True or gold["answer"] == "unknown":
                out.unknown = True
            else:
                out.answer = gold["answer"]
    for name, value in (row.get("labels") or {}).items():
        if (b := _as_bool(value)) is not None:
            out.passed[name] = b
    if isinstance(row.get("context_labels"), list):
        out.chunks["chunk_relevance"] = ["relevant" if x else "not_relevant" for x in row["context_labels"]]
    return out


def _none_if_nan(x: float) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _mean_metric(name: str, values: Sequence[float], reason: str) -> Metric:
    if not values:
        return Metric(name=name, value=None, n=0, reason=reason)
    arr = np.asarray(values, dtype=float)
    stderr = float(arr.std(ddof=1) / math.sqrt(len(arr))) if len(arr) > 1 else None
    return Metric(name=name, value=float(arr.mean()), n=len(arr), stderr=stderr)


def _rate_stderr(p: float, n: int) -> float | None:
    return math.sqrt(p * (1 - p) / n) if n > 1 else None


def reliability_bins(scores: Sequence[float], truth: Sequence[bool], n_bins: int = 10) -> list[dict[str, float]]:
    """Equal-width bins of ``scores`` in [0, 1]: mean score, share of true labels and count per bin."""
    bins: list[dict[str, float]] = []
    s, t = np.asarray(scores, dtype=float), np.asarray(truth, dtype=float)
    idx = np.minimum((s * n_bins).astype(int), n_bins - 1)
    for b in range(n_bins):
        mask = idx == b
        if mask.any():
            bins.append(
                {
                    "lo": b / n_bins,
                    "hi": (b + 1) / n_bins,
                    "mean_score": float(s[mask].mean()),
                    "frac_true": float(t[mask].mean()),
                    "n": int(mask.sum()),
                }
            )
    return bins


def expected_calibration_error(scores: Sequence[float], truth: Sequence[bool], n_bins: int = 10) -> float:
    """ECE: sum over equal-width bins of (n_bin / n) * |mean score - share true| (Guo et al. 2017)."""
    n = len(scores)
    return float(
        sum(b["n"] / n * abs(b["mean_score"] - b["frac_true"]) for b in reliability_bins(scores, truth, n_bins))
    )


def ece_noise_floor(
    scores: Sequence[float] | np.ndarray, n_bins: int = 10, *, draws: int = 500, seed: int = 0
) -> float:
    """The ECE a *perfectly calibrated* predictor with these ``scores`` shows on average at this n.

    Binned ECE is biased upwards on small samples (Roelofs et al. 2022, "Mitigating Bias in
    Calibration Error Estimation"; Kumar et al. 2019): even when every label is drawn with
    exactly the predicted probability, the per-bin share true scatters around the mean score.
    This draws ``draws`` label sets ``truth ~ Bernoulli(scores)`` (seeded) and averages their
    :func:`expected_calibration_error`. A measured ECE near it is as calibrated as ``n`` items can
    show; a target below it cannot be verified at that n.

    Args:
        scores: (n,) predicted probabilities in [0, 1] (P(option 0), or top-label confidence).
    Returns:
        The mean ECE over the draws, in [0, 1]; 0.0 for no scores.
    """
    s = np.asarray(scores, dtype=float)
    if s.size == 0:
        return 0.0
    truth = np.random.default_rng(seed).random((draws, s.size)) < s  # (draws, n)
    idx = np.minimum((s * n_bins).astype(int), n_bins - 1)
    total = np.zeros(draws)
    for b in np.unique(idx):
        mask = idx == b
        total += mask.sum() / s.size * np.abs(s[mask].mean() - truth[:, mask].mean(axis=1))
    return float(total.mean())


def _length_baseline_auroc(entries: list[tuple[bool, int | None]]) -> Metric | None:
    """AUROC of "shorter text = should pass" against gold: the length artefact of HaluEval/WikiEval."""
    known = [(g, n) for g, n in entries if n is not None]
    if not known or len({g for g, _ in known}) < 2:
        return None
    value = roc_auc_score([g for g, _ in known], [-n for _, n in known])
    return Metric(
        name="length_baseline_auroc",
        value=float(value),
        n=len(known),
        reason="AUROC of 'the shorter text passes'; compare the evaluator's auroc with it",
    )


def _classification(name: str, pairs: list[tuple[bool, bool, float | None]], positive: str) -> list[Metric]:
    """Metrics of predicted ``passed`` against gold ``passed``: (pred, gold, score) triples."""
    if not pairs:
        why = "no items with both a pass verdict and a gold label"
        return [Metric(name=m, value=None, n=0, reason=why) for m in ("precision", "recall", "f1", "accuracy")]
    pos = positive == "passed"
    y_pred = [p == pos for p, _, _ in pairs]
    y_true = [g == pos for _, g, _ in pairs]
    n = len(pairs)
    p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, average="binary", pos_label=True, zero_division=np.nan)
    out = []
    for mname, value, denom_why in (
        ("precision", p, "no item was predicted positive"),
        ("recall", r, "no item is positive in the gold labels"),
        ("f1", f, "precision or recall is undetermined, or both are 0"),
    ):
        v = _none_if_nan(value)
        out.append(Metric(name=mname, value=v, n=n, reason=None if v is not None else denom_why))
    acc = float(accuracy_score(y_true, y_pred))
    out.append(Metric(name="accuracy", value=acc, n=n, stderr=_rate_stderr(acc, n)))
    scored = [(s, g) for _, g, s in pairs if s is not None]
    truth = [g for _, g in scored]
    if scored and len(set(truth)) == 2:
        scores = [s for s, _ in scored]
        auroc = roc_auc_score(truth, scores)
        out.append(Metric(name="auroc", value=float(auroc), n=len(scored)))
        out.append(
            Metric(
                name="ece",
                value=expected_calibration_error(scores, truth),
                n=len(scored),
                higher_is_better=False,
            )
        )
    else:
        why = "AUROC needs scored items of both gold classes"
        out.append(Metric(name="auroc", value=None, n=len(scored), reason=why))
    return out


def _pairwise(entries: list[tuple[str, bool, float | None, int | None]]) -> list[Metric]:
    """Pairwise accuracy (RAGAS protocol): the preferred item of each pair must score higher;
    ties count 1/2. Beside it, the same figure for "the shorter text is preferred"."""
    groups: dict[str, list[tuple[bool, float | None, int | None]]] = defaultdict(list)
    for pair_id, preferred, value, length in entries:
        groups[pair_id].append((preferred, value, length))
    wins: list[float] = []
    short_wins: list[float] = []
    ties = 0
    for members in groups.values():
        good = [(v, n) for pref, v, n in members if pref and v is not None]
        bad = [(v, n) for pref, v, n in members if not pref and v is not None]
        if len(good) == 1 and len(bad) == 1:
            (gv, gn), (bv, bn) = good[0], bad[0]
            wins.append(1.0 if gv > bv else 0.5 if gv == bv else 0.0)
            ties += gv == bv
            if gn is not None and bn is not None:
                short_wins.append(1.0 if gn < bn else 0.5 if gn == bn else 0.0)
    if not wins:
        return [Metric(name="pairwise_accuracy", value=None, n=0, reason="no complete pair with both items scored")]
    acc = float(np.mean(wins))
    out = [
        Metric(name="pairwise_accuracy", value=acc, n=len(wins), stderr=_rate_stderr(acc, len(wins))),
        Metric(name="pairwise_ties", value=float(ties), n=len(wins), higher_is_better=False),
    ]
    if short_wins:
        out.append(
            Metric(
                name="length_baseline_pairwise_accuracy",
                value=float(np.mean(short_wins)),
                n=len(short_wins),
                reason="share of pairs where the preferred text is the shorter",
            )
        )
    return out


def _chunk_metrics(pred: list[str], gold: list[str]) -> list[Metric]:
    n = len(pred)
    if not n:
        return [Metric(name="chunk_accuracy", value=None, n=0, reason="no chunks with gold labels")]
    acc = float(accuracy_score(gold, pred))
    labels = sorted(set(gold) | set(pred))
    macro = f1_score(gold, pred, labels=labels, average="macro", zero_division=0)
    return [
        Metric(name="chunk_accuracy", value=acc, n=n, stderr=_rate_stderr(acc, n)),
        Metric(name="chunk_macro_f1", value=float(macro), n=n),
    ]


def _typed_prediction(answer: Mapping[str, Any]) -> tuple[Any, float | None]:
    """(the answer's decision comparable with ``gold.answer``, expected level for scores)."""
    if answer.get("type") == "noul":
        return float(answer["noul"]) >= 0.5, None
    if answer.get("type") == "choice":
        return answer["choice"], None
    probs = {int(k): float(v) for k, v in answer["probabilities"].items()}
    return max(probs, key=lambda k: (probs[k], -k)), float(answer["score"])


def _typed_metrics(entries: list[tuple[Mapping[str, Any], Any]], unknown: int) -> list[Metric]:
    out: list[Metric] = []
    by_type: dict[str, list[float]] = defaultdict(list)
    errors: list[float] = []
    for answer, gold in entries:
        pred, level = _typed_prediction(answer)
        by_type[answer.get("type", "?")].append(float(pred == gold))
        if level is not None and isinstance(gold, int) and not isinstance(gold, bool):
            errors.append(abs(level - gold))
    hits = [h for hs in by_type.values() for h in hs]
    out.append(_mean_metric("accuracy", hits, "no typed answers with a gold answer"))
    for qtype in ("noul", "choice", "score"):
        if by_type.get(qtype):
            out.append(_mean_metric(f"accuracy_{qtype}", by_type[qtype], ""))
    if errors:
        m = _mean_metric("mae_level", errors, "")
        out.append(m.model_copy(update={"higher_is_better": False}))
    out.append(
        Metric(
            name="gold_unknown",
            value=float(unknown),
            n=unknown,
            higher_is_better=False,
            reason="items whose gold answer is 'unknown' are left out of accuracy",
        )
    )
    return out


def low_option_mass_metric(masses: Sequence[float], threshold: float = LOW_OPTION_MASS) -> Metric:
    """Share of results whose ``x_option_mass`` is under ``threshold`` (lower is better)."""
    n = len(masses)
    if not n:
        return Metric(
            name="low_option_mass", value=None, n=0, higher_is_better=False, reason="no result carries x_option_mass"
        )
    share = sum(m < threshold for m in masses) / n
    return Metric(
        name="low_option_mass",
        value=share,
        n=n,
        stderr=_rate_stderr(share, n),
        higher_is_better=False,
        reason=f"share of answers with x_option_mass under {threshold} (the scores there rest on almost nothing)",
    )


def _judged_length(name: str, lengths: Mapping[str, Any]) -> int | None:
    """Characters of the text an evaluator mostly judges: the context for retrieval evaluators,
    else the output (``x_lengths`` of a result row, written by the CLI)."""
    key = "context" if name.startswith(("chunk_relevance", "context_")) else "output"
    value = lengths.get(key)
    return int(value) if isinstance(value, (int, float)) else None


def summarize(
    rows: Iterable[Mapping[str, Any]], *, positive: Literal["passed", "failed"] = "passed"
) -> dict[str, EvaluatorSummary]:
    """Aggregate result rows (``{"results": {name: result}, "gold": Gold-dict}``) per evaluator.

    Rows may come straight from a results JSONL file; ``gold`` may be absent. With
    ``x_lengths`` (``{"output": chars, "context": chars}``) the gold comparisons also report a
    length baseline (the data README asks for one beside HaluEval and WikiEval figures).
    Evaluators are reported in first-seen order.
    """
    acc: dict[str, dict[str, Any]] = {}
    for row in rows:
        gold = Gold.model_validate(row["gold"]) if row.get("gold") else Gold()
        for name, res in row.get("results", {}).items():
            a = acc.setdefault(
                name,
                {
                    "n": 0,
                    "skipped": 0,
                    "errors": 0,
                    "scores": [],
                    "passed": [],
                    "cls": [],
                    "pairs": [],
                    "chunk_pred": [],
                    "chunk_gold": [],
                    "typed": [],
                    "unknown": 0,
                    "lengths": [],
                    "masses": [],
                },
            )
            length = _judged_length(name, row.get("x_lengths") or {})
            status = res.get("status")
            if status == "skipped":
                a["skipped"] += 1
                continue
            if status != "ok":
                a["errors"] += 1
                continue
            a["n"] += 1
            if isinstance(mass := res.get("x_option_mass"), (int, float)):
                a["masses"].append(float(mass))
            score, passed = res.get("score"), res.get("passed")
            if score is not None:
                a["scores"].append(float(score))
            if passed is not None:
                a["passed"].append(bool(passed))
            if name in gold.passed and passed is not None:
                a["cls"].append((bool(passed), gold.passed[name], score))
                a["lengths"].append((gold.passed[name], length))
            if name in gold.pair:
                pair_id, preferred = gold.pair[name]
                rank = res.get("x_soft_score")
                a["pairs"].append((pair_id, preferred, rank if rank is not None else score, length))
            if name in gold.chunks and res.get("details"):
                pred = [d["label"] for d in res["details"]]
                if name == "chunk_relevance":
                    pred = ["relevant" if d["passed"] else "not_relevant" for d in res["details"]]
                g = gold.chunks[name]
                if len(g) == len(pred):
                    a["chunk_pred"] += pred
                    a["chunk_gold"] += g
            if name == "typed_question" and res.get("answer"):
                if gold.unknown:
                    a["unknown"] += 1
                elif gold.answer is not None:
                    a["typed"].append((res["answer"], gold.answer))
    out: dict[str, EvaluatorSummary] = {}
    for name, a in acc.items():
        metrics = [
            _mean_metric("mean_score", a["scores"], "no item had a score"),
            _mean_metric("pass_rate", [float(p) for p in a["passed"]], "no item had a pass verdict"),
        ]
        if a["passed"]:
            metrics[1] = metrics[1].model_copy(
                update={"stderr": _rate_stderr(metrics[1].value or 0.0, len(a["passed"]))}
            )
        if a["masses"]:
            metrics.append(low_option_mass_metric(a["masses"]))
        if a["cls"]:
            metrics += _classification(name, a["cls"], positive)
            if (baseline := _length_baseline_auroc(a["lengths"])) is not None:
                metrics.append(baseline)
        if a["pairs"]:
            metrics += _pairwise(a["pairs"])
        if a["chunk_gold"]:
            metrics += _chunk_metrics(a["chunk_pred"], a["chunk_gold"])
        if a["typed"] or a["unknown"]:
            metrics += _typed_metrics(a["typed"], a["unknown"])
        out[name] = EvaluatorSummary(name=name, n=a["n"], skipped=a["skipped"], errors=a["errors"], metrics=metrics)
    return out
