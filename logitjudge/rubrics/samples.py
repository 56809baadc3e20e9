"""Labelled distributions out of result rows, and the calibration metrics computed on them.

A :class:`Sample` is one engine distribution over a question's options with the index of the
gold option: what calibration is fitted on and what Brier and ECE are measured on. They are read
from ``logitjudge evaluate`` result rows (``{"results": {...}, "gold": {...}}``, see
:mod:`logitjudge.rubrics.aggregate`):

=================== ============================================ ==============================
result              distribution                                 gold option
=================== ============================================ ==============================
faithfulness-like   ``probabilities`` yes/no of a yes/no         0 (true) when ``gold.passed``
(probability)       evaluator (noul)
chunk_support       each chunk's ``probabilities`` (choice, 3)   the chunk's gold label
chunk_relevance     each chunk's ``probability`` (noul)          0 when the chunk is relevant
typed_question      the System One answer (noul, choice, score)  ``gold.answer``
=================== ============================================ ==============================

Rubric evaluators judged against a binary label (answer_correctness, context_recall) give no
sample: a yes/no label does not say which of the 4 levels was right.

Metrics (all on the distributions exactly as given):
- ``nll``: mean ``-log p[gold]``;
- ``brier``: two options: ``(p_0 - y_0)^2`` (the usual binary Brier score, as scikit-learn's
  ``brier_score_loss``); more options: ``sum_k (p_k - y_k)^2`` (Brier 1950, multi-class);
- ``ece``: two options: ECE of ``p_0`` against ``y_0`` (what :func:`aggregate._classification`
  reports for P(pass)); more options: top-label ECE (confidence = max p, hit = argmax is gold).
  10 equal-width bins (Guo et al. 2017), via :func:`aggregate.expected_calibration_error`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from logitjudge.rubrics.aggregate import expected_calibration_error

__all__ = ["Sample", "samples_from_row", "samples_from_rows", "sample_metrics"]


@dataclass(frozen=True)
class Sample:
    """One labelled distribution.

    Attributes:
        id: the item id (several samples share it for per-chunk evaluators).
        source: the evaluator that produced it.
        type: the engine question type (``noul``, ``choice``, ``score``).
        probs: probabilities in option order (noul: ``(p_true, p_false)``).
        gold: index of the gold option.
    """

    id: str
    source: str
    type: str
    probs: tuple[float, ...]
    gold: int


def _typed_sample(rid: str, name: str, answer: Mapping[str, Any], gold: Any) -> Sample | None:
    kind = answer.get("type")
    if kind == "noul" and isinstance(gold, bool):
        p = float(answer["noul"])
        return Sample(rid, name, "noul", (p, 1.0 - p), 0 if gold else 1)
    probs = answer.get("probabilities")
    if not isinstance(probs, Mapping):
        return None
    if kind == "choice":
        keys = list(probs)
        if str(gold) in keys:
            return Sample(rid, name, "choice", tuple(float(probs[k]) for k in keys), keys.index(str(gold)))
    if kind == "score" and isinstance(gold, int) and not isinstance(gold, bool):
        levels = sorted(probs, key=int)
        if 0 <= gold < len(levels):
            return Sample(rid, name, "score", tuple(float(probs[k]) for k in levels), gold)
    return None


def samples_from_row(row: Mapping[str, Any]) -> list[Sample]:
    """The labelled distributions of one result row (see the module docstring)."""
    gold = row.get("gold") or {}
    rid = str(row.get("id"))
    out: list[Sample] = []
    for name, res in (row.get("results") or {}).items():
        if res.get("status") != "ok":
            continue
        details = res.get("details")
        chunk_gold = (gold.get("chunks") or {}).get(name)
        if details and chunk_gold and len(chunk_gold) == len(details):
            for d, g in zip(details, chunk_gold):
                if d.get("probabilities"):  # choice per chunk (chunk_support)
                    keys = list(d["probabilities"])
                    if g in keys:
                        probs = tuple(float(d["probabilities"][k]) for k in keys)
                        out.append(Sample(rid, name, "choice", probs, keys.index(g)))
                elif d.get("probability") is not None:  # noul per chunk (chunk_relevance)
                    p = float(d["probability"])
                    out.append(Sample(rid, name, "noul", (p, 1.0 - p), 0 if g == "relevant" else 1))
            continue
        if res.get("answer") is not None:
            if gold.get("answer") is not None and not gold.get("unknown"):
                s = _typed_sample(rid, name, res["answer"], gold["answer"])
                if s is not None:
                    out.append(s)
            continue
        probs = res.get("probabilities") or {}
        passed = (gold.get("passed") or {}).get(name)
        if (
            details is None
            and res.get("legend") is None
            and set(probs) == {"yes", "no"}
            and isinstance(passed, bool)
        ):
            p = float(probs["yes"])
            out.append(Sample(rid, name, "noul", (p, 1.0 - p), 0 if passed else 1))
    return out


def samples_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Sample]:
    """Every labelled distribution of ``rows``, in row order."""
    return [s for row in rows for s in samples_from_row(row)]


def sample_metrics(samples: Sequence[Sample]) -> dict[str, float | int | None]:
    """``n``, ``accuracy``, ``nll``, ``brier``, ``ece`` of samples (see the module docstring).

    Two-option samples may not be pooled with others; choice questions with different option
    counts (all above two) are pooled: multi-class Brier and top-label ECE are defined per sample.

    Raises:
        ValueError: two-option samples mixed with samples of more options.
    """
    if not samples:
        return {"n": 0, "accuracy": None, "nll": None, "brier": None, "ece": None}
    counts = {len(s.probs) for s in samples}
    if 2 in counts and len(counts) > 1:
        raise ValueError(f"samples mix option counts {sorted(counts)}; measure two-option samples apart")
    nlls, briers, hits, conf = [], [], [], []
    for s in samples:
        p = np.asarray(s.probs, dtype=float)  # (K,)
        y = np.zeros_like(p)
        y[s.gold] = 1.0
        nlls.append(-math.log(min(1.0, max(1e-12, p[s.gold]))))
        briers.append((p[0] - y[0]) ** 2 if len(p) == 2 else float(((p - y) ** 2).sum()))
        hits.append(int(p.argmax()) == s.gold)
        conf.append(float(p.max()))
    if counts == {2}:
        ece = expected_calibration_error([s.probs[0] for s in samples], [s.gold == 0 for s in samples])
    else:
        ece = expected_calibration_error(conf, hits)
    return {
        "n": len(samples),
        "accuracy": float(np.mean(hits)),
        "nll": float(np.mean(nlls)),
        "brier": float(np.mean(briers)),
        "ece": ece,
    }
