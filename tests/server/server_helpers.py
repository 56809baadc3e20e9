"""Helpers shared by the server tests (imported by name: the test directories are not packages)."""

from __future__ import annotations

import threading
from typing import Any

from support.scripted import ScriptedEngine


def rising(_state: Any, question: Any) -> list[float]:
    """Probabilities 1:2:...:n, so the last option wins and every number is distinct."""
    return [float(i + 1) for i in range(len(question.options))]


BODY: dict[str, Any] = {
    "model": "jev-latest",
    "state": "The parcel arrived broken and I want my money back.",
    "questions": {
        "refund": {"type": "noul", "instructions": "Does the customer want a refund?"},
        "team": {
            "type": "choice",
            "instructions": "Which team?",
            "criteria": {"Billing": None, "Shipping": "parcels"},
        },
        "anger": {"type": "score", "instructions": "How angry?", "criteria": ["Calm", "Annoyed", "Furious"]},
    },
}


class GatedEngine(ScriptedEngine):
    """The scripted engine; every ``run_batch`` waits until the test opens ``gate``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def run_batch(self, requests):  # type: ignore[override]
        self.entered.set()
        assert self.gate.wait(timeout=60), "the test never opened the gate"
        return super().run_batch(requests)


# An item every RAG evaluator can run on, and a typed choice question (evaluate-API tests).
RAG = {
    "input": "What is the refund window?",
    "output": "You can get a refund within 30 days.",
    "expected": "30 days.",
    "context": ["Refunds are accepted within 30 days of delivery.", "Shipping takes 3 to 5 days."],
}
QUESTION = {"type": "choice", "instructions": "Which team?", "criteria": {"pay": "money", "ship": "parcels"}}
