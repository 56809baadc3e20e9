"""Order coherence of System One choice answers by default (``SYSTEMONE_ROTATIONS``), on a tiny
random-weight model: a random model has a strong, arbitrary position and label prior, so a
single order moves its answers by far more than the tolerances below.

What the default guarantees, and so what is tested: a choice is put in a canonical order (by
description, then name), asked in every cyclic rotation of that order up to ``SYSTEMONE_ROTATIONS``
and the distributions are averaged, so its answer is the same (to float rounding) for every order
of the request's options, whatever their number; that holds again for the menu after an option is
added (or removed). It does not guarantee that adding an option leaves the others' odds unchanged
(IIA): ``benchmarks/studies/coherence.py`` measures that.
"""

from __future__ import annotations

import itertools
import random

import pytest

from logitjudge import Judge
from logitjudge.engine.config import EVALUATOR_ROTATIONS, SYSTEMONE_ROTATIONS
from logitjudge.engine.scheduler import estimate_tokens
from logitjudge.engine.types import EngineRequest, Option, Question

STATE = "Order 1182: the customer paid twice for one blender and asks for the second charge back."
NAMES = ["billing", "shipping", "technical", "sales", "account", "cancellation", "legal", "press", "other"]
TOL = 1e-5


@pytest.fixture(scope="module")
def tiny(make_tiny):
    return make_tiny("llama")


def _ask(judge: Judge, names: list[str], **extra) -> dict[str, float]:
    body = {
        "model": "jev-latest",
        "state": STATE,
        "questions": {"team": {"type": "choice", "instructions": "Which team?", "criteria": dict.fromkeys(names)}},
        **extra,
    }
    return judge.ask(body)["answers"]["team"]["probabilities"]


def _rotate(names: list[str], r: int) -> list[str]:
    return names[r:] + names[:r]


def test_the_default_rotates_system_one_questions_and_leaves_evaluators_single_order(tiny):
    judge = Judge(tiny)
    assert (judge.systemone_rotations, judge.default_rotations) == (SYSTEMONE_ROTATIONS, EVALUATOR_ROTATIONS)
    assert SYSTEMONE_ROTATIONS == 8 and EVALUATOR_ROTATIONS == 1
    assert judge.describe()["systemone_rotations"] == SYSTEMONE_ROTATIONS
    explicit = Judge(tiny, default_rotations=3)
    assert (explicit.systemone_rotations, explicit.default_rotations) == (3, 3)


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8])
def test_the_default_choice_answer_is_the_same_under_every_cyclic_rotation_of_its_options(tiny, n):
    judge = Judge(tiny)
    names = NAMES[:n]
    base = _ask(judge, names)
    single = _ask(judge, names, x_rotations=1)
    for r in range(1, n):
        got = _ask(judge, _rotate(names, r))
        assert max(abs(got[k] - base[k]) for k in names) < TOL, r
    # the control: one order alone moves with the rotation (else the test proves nothing)
    moved = max(
        max(abs(_ask(judge, _rotate(names, r), x_rotations=1)[k] - single[k]) for k in names) for r in range(1, n)
    )
    assert moved > 1e-3


@pytest.mark.parametrize("n", [4, 5, 9])
def test_the_default_choice_answer_is_the_same_under_every_order_of_its_options(tiny, n):
    """Every permutation (n = 4, 5), or 30 seeded ones (n = 9, above the rotation cap): the views
    come from the canonical order, so the request's order cannot reach the model."""
    judge = Judge(tiny)
    names = NAMES[:n]
    orders = list(itertools.permutations(names)) if n <= 5 else [random.Random(k).sample(names, n) for k in range(30)]
    base = _ask(judge, names)
    worst = max(max(abs(_ask(judge, list(o))[k] - base[k]) for k in names) for o in orders)
    assert worst < TOL
    # the control: one order alone moves under a permutation (else the test proves nothing)
    single = _ask(judge, names, x_rotations=1)
    assert max(abs(_ask(judge, list(reversed(names)), x_rotations=1)[k] - single[k]) for k in names) > 1e-3


def test_options_with_descriptions_are_ordered_by_description():
    from logitjudge.engine.question_types import CHOICE, SCORE

    q = Question("choice", "Pick.", (Option("b", "zebra"), Option("a", "yak"), Option("c", None)), rotations=3)
    assert CHOICE.display_order(q, 0) == (2, 1, 0)  # "" < "yak" < "zebra"
    assert CHOICE.display_order(q, 1) == (1, 0, 2)
    single = Question(q.type, q.instructions, q.options, rotations=1)
    assert CHOICE.display_order(single, 0) == (0, 1, 2)  # asked once: the request's order
    levels = Question("score", "Rate.", (Option("0", "z"), Option("1", "a")), rotations=2)
    assert SCORE.display_order(levels, 0) == (0, 1)  # levels are ordered: never sorted


@pytest.mark.parametrize(("n", "where"), [(3, 0), (3, 2), (5, 4), (7, 3)])
def test_an_added_option_gives_a_menu_whose_answer_is_again_rotation_invariant(tiny, n, where):
    """Adding an option (at any place, up to the cap) keeps the guarantee for the new menu;
    its effect on the other options' odds is measured, not guaranteed (benchmarks/studies/coherence.py)."""
    judge = Judge(tiny)
    names = NAMES[:n]
    bigger = [*names[:where], "irrelevant_option", *names[where:]]
    base = _ask(judge, bigger)
    assert set(base) == set(bigger) and sum(base.values()) == pytest.approx(1.0, abs=1e-6)
    for r in range(1, n + 1):
        got = _ask(judge, _rotate(bigger, r))
        assert max(abs(got[k] - base[k]) for k in bigger) < TOL, r
    smaller = names[1:]  # and a removed option, likewise
    small = _ask(judge, smaller)
    for r in range(1, len(smaller)):
        got = _ask(judge, _rotate(smaller, r))
        assert max(abs(got[k] - small[k]) for k in smaller) < TOL, r


def test_rotations_1_gives_the_single_order_answers(tiny):
    """``--rotations 1`` (``default_rotations=1``) and ``x_rotations: 1`` both restore the
    single-order answer: the engine's answer of the question asked once, in request order."""
    names = NAMES[:4]
    question = Question("choice", "Which team?", tuple(Option(n) for n in names))
    (alone,) = tiny.run_batch([EngineRequest(STATE, (question,))])
    expected = dict(zip(names, alone.answers[0].probabilities, strict=True))
    for got in (_ask(Judge(tiny, default_rotations=1), names), _ask(Judge(tiny), names, x_rotations=1)):
        assert max(abs(got[k] - expected[k]) for k in names) < TOL
    assert max(abs(_ask(Judge(tiny), names)[k] - expected[k]) for k in names) > 1e-3


def test_a_menu_longer_than_the_cap_gets_the_cap_in_rotations(tiny):
    judge = Judge(tiny)
    engine_request = judge.to_engine(
        judge.validate(
            {
                "model": "jev-latest",
                "state": STATE,
                "questions": {"team": {"type": "choice", "criteria": dict.fromkeys(NAMES)}},
            }
        )
    )
    (plan,) = [tiny.plan(engine_request)]
    assert len(plan.questions[0].views) == SYSTEMONE_ROTATIONS < len(NAMES)


def test_the_batch_estimate_counts_a_rotated_questions_stem_once(tiny):
    """The estimate follows the packer: 4 rotations add 3 option listings, not 3 whole branches
    (the views share the question line); its extra tokens are within 2x of the planned ones."""
    q = Question(
        "choice", "Which team handles this ticket, given the customer's words?", tuple(Option(n) for n in NAMES[:4])
    )
    q4 = Question(q.type, q.instructions, q.options, rotations=4)
    one, four = estimate_tokens(EngineRequest(STATE, (q,))), estimate_tokens(EngineRequest(STATE, (q4,)))
    branch = one - estimate_tokens(EngineRequest(STATE, ()))
    assert 0 < four - one < 3 * branch  # each view costs, but less than a whole branch
    planned_one, planned_four = tiny.plan(EngineRequest(STATE, (q,))), tiny.plan(EngineRequest(STATE, (q4,)))
    planned_extra = planned_four.n_tokens - planned_one.n_tokens
    assert planned_extra / 2 <= four - one <= planned_extra * 2
