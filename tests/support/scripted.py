"""A scripted engine with fixed probabilities, for testing routing and scoring logic only.

Engine correctness is always tested with a real model (``tests/engine``). This stand-in lets the
rubric and server tests check what they own (routes, errors, scoring arithmetic) with answers
chosen by the test: ``ScriptedEngine(lambda state, question: [0.9, 0.1])``. A continuation
question's answer takes the script's first value as the text's likelihood (``log_likelihood`` =
its log).
It implements :class:`~logitjudge.engine.backend.Backend`, the surface the
:class:`~logitjudge.judge.Judge` uses (``name``, ``run_batch``, ``describe``, ...: no
calibration, no counters, nothing to close); ``calls`` records every engine call (one per
``run_batch``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from logitjudge.engine.types import Answer, EngineRequest, EngineResult, Question, Text, Usage
from logitjudge.errors import LogitJudgeError, UnsupportedModelError

if TYPE_CHECKING:  # heads import torch; the server tests check that nothing here loads it
    from logitjudge.engine.calibration import Calibration
    from logitjudge.engine.heads import Head

ProbabilityScript = Callable[[Text, Question], Sequence[float]]


def uniform(_state: Text, question: Question) -> list[float]:
    """Every option equally likely."""
    n = len(question.options)
    return [1.0 / n] * n


class ScriptedEngine:
    """Answers every question with ``script(state, question)`` (normalised to sum to 1)."""

    def __init__(
        self, script: ProbabilityScript = uniform, *, name: str = "scripted", heads: Sequence[str] = ()
    ) -> None:
        self.script = script
        self.name = name
        self.heads = tuple(heads)  # trained heads it claims (a head question's answer is the script's too)
        self.head_evaluators: dict[str, str | None] = {}  # what each was trained on: not said
        self.calls: list[list[EngineRequest]] = []
        self.calibration: Calibration | None = None

    def run_batch(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        self.calls.append(list(requests))
        out: list[EngineResult | LogitJudgeError] = []
        for req in requests:
            answers = []
            for q in req.questions:
                raw = [float(p) for p in self.script(req.state, q)]
                if q.type == "continuation":  # the script's first value is the text's likelihood
                    n = max(1, len(str(q.options[0].name)) // 4)
                    answers.append(Answer(q.type, (1.0,), raw[0], log_likelihood=math.log(raw[0]), tokens=n))
                    continue
                total = sum(raw)
                probs = tuple(p / total for p in raw)
                zero_shot = probs if q.head is not None else None
                answers.append(Answer(q.type, probs, option_mass=1.0, label_probabilities=zero_shot))
            tokens = len(str(req.state)) // 4 + sum(len(str(q)) // 4 for q in req.questions)
            out.append(EngineResult(tuple(answers), Usage(input_tokens=tokens)))
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "device": "none",
            "dtype": "none",
            "strategy": "scripted",
            "heads": list(self.heads),
            "head_evaluators": dict(self.head_evaluators),
        }

    def set_calibration(self, calibration: Calibration | None) -> None:
        self.calibration = calibration

    def set_heads(self, heads: dict[str, Head] | None) -> None:
        self.heads = tuple(sorted(heads or {}))
        self.head_evaluators = {n: h.meta.get("evaluator") for n, h in (heads or {}).items()}

    def load_adapters(self, folders: Sequence[Any]) -> None:
        if folders:
            raise UnsupportedModelError("the scripted engine runs no model: no branch adapters")

    def planned_tokens(self, requests: Sequence[EngineRequest]) -> int:
        return 0  # no forward passes to count

    def counting_tokens(self, callback: Callable[[int], None]) -> AbstractContextManager[bool]:
        return nullcontext(False)

    def counters(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass
