"""The continuation readout: ``log P(text | state, instructions)`` read in the packed pass.

It must equal a plain causal forward over the same tokens (summed next-token log-probabilities
of the text, computed here independently with ``torch.log_softmax``), be isolated from its
siblings like every readout (1e-4 in fp32), and rank a text that follows from the state above
one that does not (default-suite model).
"""

from __future__ import annotations

import pytest
import torch

from logitjudge.engine.types import EngineRequest, Option, Question
from logitjudge.errors import InvalidRequestError

TOL = 1e-4
STATE = "Passage: The Eiffel Tower was completed in 1889 for the World's Fair in Paris."


def cont(instructions: str, text: str) -> Question:
    return Question("continuation", instructions, (Option(text),))


def noul(text: str) -> Question:
    return Question("noul", text, (Option("true"), Option("false")))


QUESTIONS = (
    cont("Write a question that the passage answers.", "When was the Eiffel Tower completed?"),
    noul("Is the passage about Paris?"),
    cont("Write a question that the passage answers.", "Who won the 1998 football World Cup?"),
)


def reference_log_likelihood(engine, question: Question) -> float:
    """log P(text) from one plain causal forward over prefix + branch + text (no packing)."""
    plan = engine.plan(EngineRequest(STATE, (question,)))
    view = plan.questions[0].views[0]
    ids = [*plan.prefix, *view.branch, *view.labels[0]]
    with torch.inference_mode():
        logits = engine.runner.model(input_ids=torch.tensor([ids])).logits[0].float()  # (L, V)
    logp = torch.log_softmax(logits, -1)
    start = len(plan.prefix) + len(view.branch)
    return float(sum(logp[i - 1, ids[i]] for i in range(start, len(ids))))


@pytest.mark.parametrize(
    "engine_name,strategy",
    [
        ("tiny_llama", "packed"),
        ("tiny_llama", "prefix_rows"),
        ("default_engine_fp32", "packed"),
        ("default_engine_fp32", "prefix_packed"),
        ("default_engine_mixed", "prefix_packed"),
    ],
)
def test_continuation_equals_a_plain_forward_and_is_isolated(request, engine_name, strategy):
    engine = request.getfixturevalue(engine_name)
    packed = engine.run_plans([engine.plan(EngineRequest(STATE, QUESTIONS))], strategy)[0].answers
    for i in (0, 2):
        ref = reference_log_likelihood(engine, QUESTIONS[i])
        assert packed[i].type == "continuation" and packed[i].probabilities == (1.0,)
        if engine.precision == "float32":  # the plain forward is all fp32; mixed runs the state in bf16
            assert packed[i].log_likelihood == pytest.approx(ref, abs=TOL * max(1.0, abs(ref)))
        else:
            assert packed[i].log_likelihood == pytest.approx(ref, abs=0.1 * max(1.0, abs(ref)))
        assert packed[i].tokens == len(
            engine.plan(EngineRequest(STATE, (QUESTIONS[i],))).questions[0].views[0].labels[0]
        )
        alone = engine.run_plans([engine.plan(EngineRequest(STATE, (QUESTIONS[i],)))], "separate")[0].answers[0]
        assert abs(alone.log_likelihood - packed[i].log_likelihood) <= TOL * max(1.0, abs(ref))
    # the noul beside them is unmoved by the continuations
    noul_alone = engine.run_plans([engine.plan(EngineRequest(STATE, QUESTIONS[1:2]))], "separate")[0].answers[0]
    assert max(abs(a - b) for a, b in zip(noul_alone.probabilities, packed[1].probabilities)) <= TOL


def test_the_text_the_passage_answers_is_more_likely(default_engine):
    answers = default_engine.run_plans([default_engine.plan(EngineRequest(STATE, QUESTIONS))], "auto")[0].answers
    assert answers[0].log_likelihood / answers[0].tokens > answers[2].log_likelihood / answers[2].tokens


def test_continuation_needs_exactly_one_non_blank_text(default_engine):
    with pytest.raises(InvalidRequestError, match="exactly 1 option"):
        default_engine.plan(EngineRequest(STATE, (Question("continuation", "x", (Option("a"), Option("b"))),)))
    with pytest.raises(InvalidRequestError, match="exactly 1 option"):
        default_engine.plan(EngineRequest(STATE, (Question("continuation", "x", (Option("  "),)),)))
