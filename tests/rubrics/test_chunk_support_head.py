"""chunk_support@4 on the default model: the shipped branch adapter reads polarity, and so does the
shipped trained head it supersedes (``--adapters none``).

The cases below were written before the head or the adapter was trained and are not tuned one by
one: plain negations and changed numbers of a claim must come out ``contradicts``, the claim
restated ``supports``, and an on-topic passage that does not settle it ``unrelated``. Without an
adapter or a head for the engine, version 3 answers and says so (``x_warning`` naming
``logitjudge fit --adapter``).
"""

from __future__ import annotations

import pytest

from logitjudge.rubrics.api import evaluate
from logitjudge.settings import MAIN_MODEL


@pytest.fixture(scope="module")
def main_judge():
    from logitjudge import Judge

    judge = Judge.load(MAIN_MODEL)
    yield judge
    judge.close()


NEGATIONS = [
    ("The museum is open on Mondays.", "The museum is not open on Mondays."),
    ("The report was published in English.", "The report was never published in English."),
    ("Anna passed the final exam.", "Anna did not pass the final exam."),
    ("The library allows dogs inside.", "Dogs are not allowed inside the library."),
    ("The river freezes every winter.", "The river does not freeze in winter."),
    ("The company pays its interns.", "The company does not pay its interns."),
]

CHANGED_NUMBERS = [
    ("The bridge is 450 meters long.", "The bridge is 620 meters long."),
    ("The team won 12 games last season.", "The team won 7 games last season."),
    ("The novel was first published in 1987.", "The novel was first published in 1993."),
    ("The subscription costs $15 per month.", "The subscription costs $25 per month."),
    ("The village has about 800 residents.", "The village has about 3,000 residents."),
    ("The flight takes 3 hours.", "The flight takes 9 hours."),
]

UNSETTLED = [
    ("The museum is open on Mondays.", "The museum has a large collection of Roman coins."),
    ("The bridge is 450 meters long.", "The bridge was designed by a local engineering firm."),
    ("Anna passed the final exam.", "Anna studied chemistry at the city university."),
]


@pytest.fixture(params=["adapter", "head"])
def reader(request, main_judge):
    """The judge as loaded (the shipped adapter answers chunk_support@4), or with its adapters
    removed (the shipped head reads the question, as with ``--adapters none``)."""
    engine = main_judge.engine
    adapters = list(engine.adapters.values())
    assert [a.name for a in adapters] == ["chunk_support"]  # shipped for the default model, loaded by default
    if request.param == "head":
        engine.set_adapters(None)
    yield main_judge
    engine.set_adapters(adapters)


def _labels(judge, claim: str, chunks: list[str]) -> list[str]:
    run = evaluate(judge, [{"output": claim, "context": chunks}], "chunk_support")
    res = run.results[0].results["chunk_support"]
    assert res.version == "4" and res.x_warning is None, res.x_warning
    return [d.label for d in res.details]


@pytest.mark.parametrize(("claim", "negated"), NEGATIONS, ids=[c for c, _ in NEGATIONS])
def test_plain_negation_contradicts(reader, claim, negated):
    assert _labels(reader, claim, [negated, claim]) == ["contradicts", "supports"]


@pytest.mark.parametrize(("claim", "changed"), CHANGED_NUMBERS, ids=[c for c, _ in CHANGED_NUMBERS])
def test_changed_number_contradicts(reader, claim, changed):
    assert _labels(reader, claim, [changed]) == ["contradicts"]


@pytest.mark.parametrize(("claim", "other"), UNSETTLED, ids=[c for c, _ in UNSETTLED])
def test_on_topic_but_unsettled_is_unrelated(reader, claim, other):
    assert _labels(reader, claim, [other]) == ["unrelated"]


def test_the_adapter_answers_by_default_and_its_answers_are_its_own(main_judge):
    """The shipped adapter is what answers by default: its question names it, and its answer differs
    from the head's on the same item (the two readers are not one)."""
    from logitjudge.rubrics.head_plan import adapter_for
    from logitjudge.rubrics.registry import default_registry

    item = {"output": "The bridge is 450 meters long.", "context": ["The bridge is 620 meters long."]}
    engine = main_judge.engine
    assert main_judge.describe()["adapter_evaluators"] == {"chunk_support": "chunk_support@4"}
    assert adapter_for(default_registry().evaluators["chunk_support"], main_judge.describe()) == "chunk_support"
    adapted = evaluate(main_judge, [item], "chunk_support").results[0].results["chunk_support"]
    adapters = list(engine.adapters.values())
    engine.set_adapters(None)
    try:
        headed = evaluate(main_judge, [item], "chunk_support").results[0].results["chunk_support"]
    finally:
        engine.set_adapters(adapters)
    assert adapted.details[0].probabilities != headed.details[0].probabilities


def test_without_an_adapter_or_a_head_version_3_answers_and_says_so(main_judge):
    """The same judge with its adapters and heads removed: chunk_support@3's answer, flagged with
    `logitjudge fit --adapter`."""
    engine = main_judge.engine
    heads, adapters = dict(engine.heads), list(engine.adapters.values())
    engine.set_heads(None)
    engine.set_adapters(None)
    try:
        run = evaluate(
            main_judge, [{"output": "Output tokens are free.", "context": ["Output tokens are free."]}], "chunk_support"
        )
    finally:
        engine.set_heads(heads)
        engine.set_adapters(adapters)
    res = run.results[0].results["chunk_support"]
    assert res.version == "3"
    assert res.x_warning is not None and "chunk_support@4" in res.x_warning
    assert "logitjudge fit --evaluator chunk_support@4 --adapter" in res.x_warning
    assert res.details is not None and res.details[0].label == "supports"
