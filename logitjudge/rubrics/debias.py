"""Batch calibration: divide out the judge's prior over the options of one question asked of many states.

A small judge brings a strong prior to a question's options: the default 1.5B answers E to 26
of sys1bench's 33 five- and six-option choice questions (gold: 11) and never the lowest two
levels of a four-level score. When one question is asked of many states (a dataset, one rubric
over every record), that prior can be estimated from the answers themselves, with no labels,
and divided out (Zhou et al. 2024, "Batch Calibration: Rethinking Calibration for In-Context
Learning and Prompt Engineering", ICLR; the content-free form: Zhao et al. 2021, "Calibrate
Before Use")::

    p̄ = mean_i p_i                 (the question's prior: its mean distribution over the batch)
    q_i ∝ p_i / p̄                  (log q_i = log p_i − log p̄ + const)

Only the item's own typed choice and score questions are adjusted: not yes/no (its prior
divided out would force every question towards a 50 % pass rate) and not the evaluators'
rubric questions (a dataset's mean score or pass rate is what they measure; dividing their
prior out would set it), and only a question asked at least :data:`MIN_BATCH` times (a prior
from a handful of answers is noise). A question is the same question whatever the order of
its options (a dataset may shuffle them per row): answers are matched by option name. Every
answer of a group is adjusted with the group's own mean, the answer itself included
(label-free, so nothing leaks). It assumes the
batch is not dominated by one true option; on a batch where one answer is right 90 % of the
time it moves answers away from the truth. Opt-in: ``logitjudge evaluate --debias batch``;
``benchmarks/quality/quality.py`` reports it beside the raw answers of the same run.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal, TypeVar, get_args

import numpy as np

from logitjudge.engine.types import Answer, EngineResult, Question

__all__ = ["MIN_BATCH", "DebiasMode", "DEBIAS_MODES", "batch_calibrate", "question_key", "batch_calibrated"]

MIN_BATCH = 10
"""Fewest answers of one question for its prior to be estimated and divided out."""

DebiasMode = Literal["none", "batch"]
"""``none``: answers as the engine gives them; ``batch``: :func:`batch_calibrated`."""
DEBIAS_MODES: tuple[str, ...] = get_args(DebiasMode)

P = TypeVar("P")


def batch_calibrate(probs: np.ndarray) -> np.ndarray:
    """Divide the mean distribution out of each row and renormalise (see the module docstring).

    Args:
        probs: (n, k) distributions of one question over n states, rows summing to 1.
    Returns:
        (n, k) the batch-calibrated distributions, rows summing to 1. An option no answer gave
        any mass keeps 0.
    """
    p = np.asarray(probs, dtype=float)
    prior = p.mean(axis=0)
    q = np.divide(p, prior, out=np.zeros_like(p), where=prior > 0)
    return q / q.sum(axis=1, keepdims=True)


def question_key(question: Question) -> str:
    """A question's identity across items: type, instructions and its set of options (names and
    descriptions), whatever their order (a dataset may shuffle the options per row; the prior
    divided out is over the options themselves, matched by name)."""
    options = sorted([o.name, o.description] for o in question.options)
    return json.dumps([question.type, question.instructions, options], sort_keys=True, default=str)


def batch_calibrated(
    answered: Sequence[tuple[P, Sequence[Question | None], EngineResult | object]],
) -> tuple[list[tuple[P, Sequence[Question | None], EngineResult | object]], dict[str, int]]:
    """Batch-calibrate every choice/score question asked at least :data:`MIN_BATCH` times.

    Args:
        answered: per item, ``(anything, its questions, its EngineResult)``: the questions in
            the order of the result's answers, ``None`` for one never to adjust; a response that
            is not an :class:`EngineResult` (an error, or None) is passed through.
    Returns:
        The same triples with adjusted answers, and counts: ``questions`` (groups adjusted),
        ``answers`` (answers adjusted), ``left`` (choice/score groups under :data:`MIN_BATCH`).
    """
    # key -> (item, question, answer, the answer's option positions in name order)
    groups: dict[str, list[tuple[int, int, Answer, list[int]]]] = defaultdict(list)
    for i, (_, questions, response) in enumerate(answered):
        if isinstance(response, EngineResult):
            for j, (q, a) in enumerate(zip(questions, response.answers, strict=True)):
                if q is not None and q.type != "noul":
                    names = [o.name for o in q.options]
                    groups[question_key(q)].append((i, j, a, sorted(range(len(names)), key=names.__getitem__)))
    new: dict[tuple[int, int], Answer] = {}
    left = 0
    for members in groups.values():
        if len(members) < MIN_BATCH:
            left += 1
            continue
        by_name = np.array([[a.probabilities[k] for k in order] for _, _, a, order in members])
        for (i, j, a, order), q in zip(members, batch_calibrate(by_name), strict=True):
            probs = [0.0] * len(order)
            for k, x in zip(order, q.tolist(), strict=True):
                probs[k] = x  # back to the answer's own option order
            new[i, j] = dataclasses.replace(a, probabilities=tuple(probs))
    out = []
    for i, (tag, questions, response) in enumerate(answered):
        if isinstance(response, EngineResult) and any((i, j) in new for j in range(len(questions))):
            answers = tuple(new.get((i, j), a) for j, a in enumerate(response.answers))
            response = dataclasses.replace(response, answers=answers)
        out.append((tag, questions, response))
    adjusted_groups = sum(len(m) >= MIN_BATCH for m in groups.values())
    return out, {"questions": adjusted_groups, "answers": len(new), "left": left}
