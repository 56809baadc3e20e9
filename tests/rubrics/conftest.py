"""Fixtures of the rubric tests: a judge over a scripted engine with per-test probabilities."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from support.scripted import ScriptedEngine

from logitjudge.engine.types import Question
from logitjudge.judge import Judge


@pytest.fixture
def scripted() -> Callable[[Callable[[object, Question], Sequence[float]]], Judge]:
    """``scripted(script)`` -> a Judge whose engine answers ``script(state, question)``."""

    def make(script: Callable[[object, Question], Sequence[float]]) -> Judge:
        return Judge(ScriptedEngine(script))

    return make
