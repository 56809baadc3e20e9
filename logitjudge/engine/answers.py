"""Answer fields from one final distribution: argmax, expected score, confidence.

Every field of an answer is computed here from the same probabilities the answer reports, so
``choice`` is always their argmax and ``score`` always their expectation (jevcompat
``score.expectation``; the jeff server failed it by computing the score before tempering).

Confidence formulas: ``shared/spec/api.md`` A.7, the reference implementation in jevcompat
``validate.py`` (quoted from TypeSafe's ``system-one-adapter-python`` ``confidence_metrics.py``).
"""

from __future__ import annotations

from collections.abc import Sequence


def argmax(probabilities: Sequence[float]) -> int:
    """Index of the largest probability; ties go to the earliest option (request order)."""
    best = 0
    for i, p in enumerate(probabilities):
        if p > probabilities[best]:
            best = i
    return best


def choice_confidence(probabilities: Sequence[float]) -> float:
    """``(m - 1/n) / (1 - 1/n)`` with m the largest of n probabilities; 1.0 when n <= 1.

    Source: spec A.7 "Choice". For three options this is ``(3m - 1)/2``; ``{0.88, 0.12}`` -> 0.76.
    Returns a value in [0, 1] (clipped against float error).
    """
    n = len(probabilities)
    if n <= 1:
        return 1.0
    m = max(probabilities)
    return min(1.0, max(0.0, (m - 1.0 / n) / (1.0 - 1.0 / n)))


def score_dispersion_of_uniform(n: int) -> float:
    """``D = (1/n) * sum_i |i - (n-1)/2|``, the spread of a uniform distribution over n levels."""
    centre = (n - 1) / 2.0
    return sum(abs(i - centre) for i in range(n)) / n


def score_confidence(probabilities: Sequence[float]) -> float:
    """``max(0, 1 - spread / D)`` with ``spread = sum_i p_i |i - k|``, k the mode; 1.0 when n <= 1.

    Source: spec A.7 "Score" (the distance formula the mock and proxy emit).
    ``{0.0, 0.95, 0.05}`` -> 1 - 0.05/0.6667 = 0.925.
    """
    n = len(probabilities)
    if n <= 1:
        return 1.0
    k = argmax(probabilities)
    spread = sum(p * abs(i - k) for i, p in enumerate(probabilities))
    return min(1.0, max(0.0, 1.0 - spread / score_dispersion_of_uniform(n)))


def expected_score(probabilities: Sequence[float]) -> float:
    """``sum_i i * p_i``: the expected level, in level units (0 .. n-1)."""
    return float(sum(i * p for i, p in enumerate(probabilities)))


def noul_distribution(p_yes: float) -> tuple[float, float]:
    """``(P(yes), P(no))``: a noul's two-option distribution (options ``true``, ``false``) from the
    wire answer's ``noul``.

    The engine gives both probabilities, but a wire noul answer carries only ``noul`` = P(yes)
    (spec A.6.2), so whoever reads wire answers (rubric scoring, calibration samples) rebuilds
    the pair here, and only here: ``P(no) = 1 - P(yes)``.
    """
    return p_yes, 1.0 - p_yes


def decisiveness(p_yes: float) -> float:
    """``|p - 0.5| * 2``: the evaluator API's yes/no confidence (spec B.6); not on noul answers."""
    return abs(p_yes - 0.5) * 2.0
