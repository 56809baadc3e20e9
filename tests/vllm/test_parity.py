"""The vLLM backend gives the transformers backend's answers (fp32, default model, within 1e-4).

Same request, same token ids: both engines plan with our prompt builder; only the label
log-probs come from different forward passes (our packed row vs vLLM's paged, prefix-cached
sequences). Covered: noul, choice (2, 26 and 255 options, rotations), score (3 and 10 levels),
multi-token labels (a prompt builder capped at 20 single-token labels, so 255 options get
fixed-width numbers scored token by token), and the x_option_mass.
"""

from __future__ import annotations

from typing import Any

import pytest

from logitjudge.engine.pack import QuestionPlan, RequestPlan
from logitjudge.engine.prompt import PromptBuilder
from logitjudge.engine.types import EngineRequest, Option, Question

TOL = 1e-4

STATE = (
    "Ticket 5521. I ordered a standing desk on 3 March; it arrived with a cracked leg and the "
    "courier left it in the rain. I have emailed twice and nobody answered. I want a replacement "
    "or my money back by Friday, otherwise I will dispute the charge with my bank."
)


def _questions() -> dict[str, Any]:
    return {
        "refund": {"type": "noul", "instructions": "Does the customer want a refund or a replacement?"},
        "team": {
            "type": "choice",
            "instructions": "Which team should take this?",
            "criteria": {"Billing": "payments", "Shipping": "couriers and damage", "Tech": None},
        },
        "letters": {
            "type": "choice",
            "instructions": "Which word fits the ticket best?",
            "criteria": {f"word{i}": None for i in range(26)},
        },
        "anger": {"type": "score", "instructions": "How angry?", "criteria": ["Calm", "Annoyed", "Furious"]},
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": [f"level {i}" for i in range(10)]},
    }


def _max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    diff = 0.0
    for qid, x in a["answers"].items():
        y = b["answers"][qid]
        if x["type"] == "noul":
            diff = max(diff, abs(x["noul"] - y["noul"]))
        else:
            diff = max(diff, *(abs(x["probabilities"][k] - y["probabilities"][k]) for k in x["probabilities"]))
            if x["type"] == "score":
                diff = max(diff, abs(x["score"] - y["score"]) / (len(x["probabilities"]) - 1))
        diff = max(diff, abs(x["x_option_mass"] - y["x_option_mass"]))
    return diff


def test_noul_choice_and_score_match_transformers(default_judge, vllm_judge) -> None:
    body = {"model": "jev-latest", "state": STATE, "questions": _questions()}
    ref, got = default_judge.ask(body), vllm_judge.ask(body)
    assert got["usage"] == ref["usage"]  # the same tokens, counted the same way
    assert _max_diff(ref, got) <= TOL
    for qid, x in ref["answers"].items():
        if x["type"] == "choice":
            assert got["answers"][qid]["choice"] == x["choice"]


def test_rotations_match_transformers(default_judge, vllm_judge) -> None:
    body = {"model": "jev-latest", "state": STATE, "questions": _questions(), "x_rotations": 3}
    assert _max_diff(default_judge.ask(body), vllm_judge.ask(body)) <= TOL


def test_255_options_match_transformers(default_judge, vllm_judge) -> None:
    criteria = {f"option {i:03d}": (f"description {i}" if i % 7 == 0 else None) for i in range(255)}
    body = {
        "model": "jev-latest",
        "state": STATE,
        "questions": {"many": {"type": "choice", "instructions": "Which option?", "criteria": criteria}},
    }
    ref, got = default_judge.ask(body), vllm_judge.ask(body)
    assert _max_diff(ref, got) <= TOL
    assert got["answers"]["many"]["choice"] == ref["answers"]["many"]["choice"]


def _plan(builder: PromptBuilder, request: EngineRequest) -> RequestPlan:
    questions = tuple(QuestionPlan(q.type, builder.views(q), len(q.options)) for q in request.questions)
    return RequestPlan(tuple(builder.prefix_ids(request.state)), questions)


@pytest.mark.parametrize("n_options", [30, 255])
def test_multi_token_labels_match_transformers(default_judge, vllm_judge, n_options: int) -> None:
    # 20 single-token labels at most: more options get fixed-width numbers of several tokens
    builder = PromptBuilder(default_judge.engine.prompt.tokenizer, max_single_token_labels=20)
    question = Question("choice", "Which option?", tuple(Option(f"option {i}", None) for i in range(n_options)))
    plan = _plan(builder, EngineRequest(STATE, (question,)))
    assert max(len(label) for label in plan.questions[0].views[0].labels) > 1  # really multi-token
    ref = default_judge.engine.run_plans([plan])[0].answers[0]
    got = vllm_judge.engine.run_plans([plan])[0].answers[0]
    assert max(abs(a - b) for a, b in zip(ref.probabilities, got.probabilities)) <= TOL
    assert abs(ref.option_mass - got.option_mass) <= TOL


def test_describe_names_the_backend_and_the_limits(vllm_judge) -> None:
    info = vllm_judge.engine.describe()
    assert info["backend"] == "vllm" and info["strategy"] == "vllm" and info["dtype"] == "float32"
    assert info["max_state_tokens"] == info["max_model_len"] - 1  # one token for vLLM's sample
    assert info["vllm"]["block_size"] == 32
