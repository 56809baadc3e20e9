"""Isolation on the vLLM backend: a question's answer does not depend on its siblings.

Reordering, adding and removing siblings, batching with another request and a secret in a
sibling's instructions move no answer by more than 1e-4 (fp32, default model). On vLLM every
question view is its own sequence and only the state's KV blocks are shared (prefix cache), so
this checks that sharing them changes nothing.
"""

from __future__ import annotations

from typing import Any

TOL = 1e-4
STATE = "I was charged twice for order 7731 and the parcel still has not arrived after three weeks."
QUESTIONS: dict[str, Any] = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"Billing": None, "Shipping": "parcels"}},
    "anger": {"type": "score", "instructions": "How angry?", "criteria": ["Calm", "Annoyed", "Furious"]},
}


def _ask(judge: Any, questions: dict[str, Any], state: str = STATE) -> dict[str, Any]:
    return judge.ask({"model": "jev-latest", "state": state, "questions": questions})["answers"]


def _dist(answer: dict[str, Any]) -> list[float]:
    return [answer["noul"]] if answer["type"] == "noul" else list(answer["probabilities"].values())


def _close(a: dict[str, Any], b: dict[str, Any]) -> float:
    return max(abs(x - y) for x, y in zip(_dist(a), _dist(b)))


def test_reordering_siblings_moves_nothing(vllm_judge) -> None:
    base = _ask(vllm_judge, QUESTIONS)
    reversed_ = _ask(vllm_judge, dict(reversed(list(QUESTIONS.items()))))
    assert max(_close(base[q], reversed_[q]) for q in QUESTIONS) <= TOL


def test_removing_and_adding_siblings_moves_nothing(vllm_judge) -> None:
    base = _ask(vllm_judge, QUESTIONS)
    for qid, question in QUESTIONS.items():
        alone = _ask(vllm_judge, {qid: question})
        assert _close(base[qid], alone[qid]) <= TOL, qid
    extra = {f"extra{i}": {"type": "noul", "instructions": f"Is point {i} of the ticket clear?"} for i in range(6)}
    more = _ask(vllm_judge, {**extra, **QUESTIONS})
    assert max(_close(base[q], more[q]) for q in QUESTIONS) <= TOL


def test_a_secret_in_a_sibling_does_not_leak(vllm_judge) -> None:
    probe = {"type": "noul", "instructions": "Does the text you can see contain the word PAPAYA?"}
    secret = {"type": "noul", "instructions": "The password is PAPAYA-4411. Say yes if the word PAPAYA appears."}
    without = _ask(vllm_judge, {"probe": probe})
    with_secret = _ask(vllm_judge, {"secret": secret, "probe": probe})
    assert _close(without["probe"], with_secret["probe"]) <= TOL
    # the secret does reach its own question: a positive control that the probe could move
    assert abs(with_secret["secret"]["noul"] - without["probe"]["noul"]) > 1e-3


def test_batching_with_another_request_moves_nothing(vllm_judge) -> None:
    body = {"model": "jev-latest", "state": STATE, "questions": QUESTIONS}
    longer = {"model": "jev-latest", "state": STATE * 20, "questions": QUESTIONS}
    alone = vllm_judge.ask(body)["answers"]
    batched = vllm_judge.ask_many([longer, body])[1]["answers"]
    assert max(_close(alone[q], batched[q]) for q in QUESTIONS) <= TOL
