"""Judge factories for ``logitjudge evaluate --judge-factory`` in subprocess tests.

A scripted engine (fixed probabilities) stands in for the model: the tests that use these
check the CLI's resume and file handling, not the engine. ``make_slow_judge`` pauses in every
engine call so a test can kill the process part-way through a run.
"""

from __future__ import annotations

import time

from support.scripted import ScriptedEngine

from logitjudge.judge import Judge


def _script(state, question):
    # Yes for the first chunk, else mostly no; the first option/level wins otherwise.
    ins = str(question.instructions or "")
    if question.type == "noul":
        return [0.8, 0.2] if "context[0]" in ins else [0.3, 0.7]
    n = len(question.options)
    return [2.0] + [1.0] * (n - 1)


def make_judge() -> Judge:
    return Judge(ScriptedEngine(_script))


def _slow_script(state, question):
    time.sleep(0.15)
    return _script(state, question)


def make_slow_judge() -> Judge:
    return Judge(ScriptedEngine(_slow_script))


def _stuck_script(state, question):
    time.sleep(300)  # longer than any test waits: the call is still running when the test ends
    return _script(state, question)


def make_stuck_judge() -> Judge:
    """An engine whose every call outlasts the test (``serve``'s drain that times out)."""
    return Judge(ScriptedEngine(_stuck_script))
