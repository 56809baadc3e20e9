"""Question types are records: the registry matches the typed names, every type is documented,
and the worked example of CONTRIBUTING ("Add a question type") runs as written: a new type is
one record plus its render function, answered by a real (tiny random-weight) model in one pass
with its siblings, equal to separate passes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from logitjudge.engine.question_types import QUESTION_TYPES, question_type
from logitjudge.engine.scheduler import estimate_tokens
from logitjudge.engine.types import EngineRequest, Option, Question, QuestionType
from logitjudge.errors import InvalidRequestError

ROOT = Path(__file__).resolve().parents[2]
STATE = "The package left the warehouse on Monday and arrived, undamaged, on Wednesday."


def _section(text: str, heading: str) -> str:
    rest = text[text.index(heading) + len(heading) :]
    nxt = re.search(r"^## ", rest, re.M)
    return rest[: nxt.start()] if nxt else rest


CONTRIBUTING = _section((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"), "## Add a question type")


def test_the_registry_holds_exactly_the_typed_names():
    assert set(QUESTION_TYPES) == set(get_args(QuestionType))
    for name, spec in QUESTION_TYPES.items():
        assert spec.name == name


@pytest.mark.parametrize("name", sorted(QUESTION_TYPES))
def test_every_type_is_in_the_contributing_table(name):
    assert re.search(rf"^\| `{name}` \|", CONTRIBUTING, re.M), name


def test_an_unknown_type_is_a_request_error_naming_the_field():
    with pytest.raises(InvalidRequestError) as err:
        question_type("ranking", 3)
    assert err.value.field == ("questions", 3, "type")


@pytest.fixture
def truth(monkeypatch):
    """The CONTRIBUTING worked example, executed from the page and registered for one test."""
    code = re.search(r"```python\n(.*?)```", CONTRIBUTING, re.S)
    assert code is not None
    namespace: dict = {}
    exec(compile(code.group(1), "CONTRIBUTING.md", "exec"), namespace)  # noqa: S102 - our own docs
    monkeypatch.setitem(QUESTION_TYPES, "truth", namespace["TRUTH"])
    return namespace["TRUTH"]


def _truth(statement: str) -> Question:
    return Question("truth", statement, (Option("true"), Option("false")))  # type: ignore[arg-type]


def test_the_worked_example_is_answered_with_its_siblings(truth, tiny_llama):
    questions = (
        _truth("The package arrived on Wednesday."),
        Question("noul", "Was the package damaged?", (Option("true"), Option("false"))),
        _truth("The package arrived broken."),
        Question("choice", "When did it ship?", (Option("Monday"), Option("Friday")), rotations=2),
    )
    plan = tiny_llama.plan(EngineRequest(STATE, questions))
    first = tiny_llama.prompt.tokenizer.decode(list(plan.questions[0].views[0].branch))
    assert "Statement: The package arrived on Wednesday." in first and "Reply with True or False." in first
    assert [len(q.views) for q in plan.questions] == [1, 1, 1, 2]
    separate = tiny_llama.run_plans([plan], "separate")[0].answers
    packed = tiny_llama.run_plans([plan], "packed")[0].answers
    for a, b in zip(separate, packed):
        assert a.type == b.type and abs(sum(a.probabilities) - 1) < 1e-6
        assert max(abs(x - y) for x, y in zip(a.probabilities, b.probabilities)) < 1e-4
    assert [a.type for a in packed] == ["truth", "noul", "truth", "choice"]
    assert estimate_tokens(EngineRequest(STATE, questions)) > 0


def test_the_worked_example_checks_its_options(truth, tiny_llama):
    bad = Question("truth", "Three outcomes?", (Option("true"), Option("false"), Option("maybe")))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match=r"questions\[0\]: a truth has exactly 2 outcomes, got 3") as err:
        tiny_llama.plan(EngineRequest(STATE, (bad,)))
    assert err.value.field == ("questions", 0, "criteria")


def test_rotations_reach_only_the_types_that_rotate():
    """An evaluator run with rotations (`--rotations 4`) gives them to its choice and score
    questions only: a continuation (chunk_relevance's likelihood readout) refuses rotations, so
    handing them to it failed every such item."""
    from logitjudge.convert import with_rotations

    text = Question("continuation", "Say it.", (Option("the text"),))
    noul = Question("noul", "Yes?", (Option("true"), Option("false")))
    pick = Question("choice", "Which?", (Option("a"), Option("b")))
    assert with_rotations(text, 4).rotations == 1 and with_rotations(noul, 4).rotations == 1
    assert with_rotations(pick, 4).rotations == 4
    QUESTION_TYPES["continuation"].check(with_rotations(text, 4), 0)  # accepted as the engine gets it


def test_the_first_bad_question_is_the_one_reported(tiny_llama):
    three = Question("noul", "Three?", (Option("true"), Option("false"), Option("maybe")))
    unknown = Question("ranking", "Rank.", (Option("a"), Option("b")))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError) as err:
        tiny_llama.plan(EngineRequest(STATE, (three, unknown)))
    assert err.value.field == ("questions", 0, "criteria")
    assert estimate_tokens(EngineRequest(STATE, (unknown,))) > 0  # the estimate leaves the refusal to the engine


@pytest.mark.parametrize(
    ("name", "options", "gold", "gold_index"),
    [
        ("noul", ("true", "false"), False, 1),
        ("choice", ("supports", "contradicts", "unrelated"), "contradicts", 1),
        ("score", ("0", "1", "2", "3"), 2, 2),
    ],
)
def test_a_wire_answer_reads_back_with_its_gold_option(name, options, gold, gold_index):
    """``read_gold`` is the way back from ``wire_fields``: the distribution the wire carries
    (noul: P(true) and its complement) and the index of a labelled row's gold answer in it."""
    spec = question_type(name)
    probs = (
        (0.6, 0.4) if name == "noul" else tuple(p / sum(range(1, len(options) + 1)) for p in range(1, len(options) + 1))
    )
    question = Question(name, "Is it so?", tuple(Option(o, f"level {o}") for o in options))
    wire = {"type": name, **spec.wire_fields(question, probs)}
    got, index = spec.read_gold(wire, gold)
    assert got == pytest.approx(probs) and index == gold_index


def test_a_gold_answer_that_does_not_fit_the_type_reads_as_none():
    assert question_type("noul").read_gold({"type": "noul", "noul": 0.7}, "yes") is None  # not a bool
    assert question_type("choice").read_gold({"probabilities": {"a": 0.5, "b": 0.5}}, "c") is None  # no such option
    assert question_type("score").read_gold({"probabilities": {"0": 0.5, "1": 0.5}}, 2) is None  # no such level
    assert question_type("score").read_gold({"probabilities": {"0": 0.5, "1": 0.5}}, True) is None  # a bool
    assert question_type("continuation").read_gold is None  # not on the wire


@pytest.mark.parametrize("name", ["choice", "score"])
def test_two_options_with_one_name_are_a_request_error(name, tiny_llama):
    """Through the typed API (the wire's criteria are a JSON object, so names cannot repeat there):
    two options named alike would share one key of ``probabilities``."""
    question = Question(name, "Which?", (Option("A", "first"), Option("B", "second"), Option("A", "third")))
    with pytest.raises(
        InvalidRequestError, match=r"questions\[0\]\.criteria: option names must be distinct.*'A'"
    ) as err:
        tiny_llama.plan(EngineRequest(STATE, (question,)))
    assert err.value.field == ("questions", 0, "criteria")
