"""The engine reports the tokens its forward passes process, and ``logitjudge evaluate``'s bar
moves by them inside one engine call (tiny random-weight models of real architectures)."""

from __future__ import annotations

import pytest

from logitjudge import Judge
from logitjudge.cli.progress import ItemProgress
from logitjudge.engine.types import EngineRequest, Option, Question
from logitjudge.rubrics.judgelike import ReportsTokens

YES_NO = (Option("true"), Option("false"))


def _requests(n: int) -> list[EngineRequest]:
    questions = (Question("noul", "Is the sky blue?", YES_NO), Question("noul", "Is grass green?", YES_NO))
    return [EngineRequest(f"Report {i}: the sky was blue all day. " * 5, questions) for i in range(n)]


# a prefix and packed branches; sliding windows (4 layers, 3 tokens do not split evenly); a token per step
@pytest.mark.parametrize("kind", ["llama", "gemma3", "mamba"])
def test_the_tokens_counted_are_the_tokens_planned(make_tiny, kind):
    judge = Judge(make_tiny(kind))
    assert isinstance(judge, ReportsTokens)
    requests = _requests(3)
    planned = judge.planned_tokens(requests)
    counted: list[int] = []
    with judge.counting_tokens(counted.append) as live:
        judge.answer_many(requests)
    assert live is True
    assert sum(counted) == planned > 0 and all(isinstance(t, int) for t in counted)  # whole tokens
    assert len(counted) % judge.engine.runner.n_layers == 0  # one report per decoder layer per forward
    cached = judge.planned_tokens(requests)  # the states are in the state cache now ...
    assert 0 < cached < planned if kind != "gemma3" else cached == planned  # ... except after packed rows
    again: list[int] = []
    with judge.counting_tokens(again.append):
        judge.answer_many(requests)
    assert sum(again) == cached  # no forward over the cached states, and none planned
    reported = len(again)
    judge.answer_many(requests)  # closed: the hooks are gone
    assert len(again) == reported


def test_a_request_that_fails_plans_no_tokens(tiny_llama):
    judge = Judge(tiny_llama)
    good = _requests(1)
    bad = EngineRequest("   ", good[0].questions)  # an empty state: its own 422
    assert judge.planned_tokens([good[0], bad]) == judge.planned_tokens(good)


def test_the_bar_moves_within_one_call_and_lands_on_whole_items(make_tiny):
    judge = Judge(make_tiny("llama", strategy="prefix_rows"))  # several forwards per call
    progress = ItemProgress(total=4, initial=0, pending=4, batch_size=4)
    wrapped = progress.wrap(judge)
    assert wrapped.default_rotations == judge.default_rotations  # everything else is forwarded
    seen: list[float] = []
    last = judge.engine.runner.decoder.layers[-1]
    handle = last.register_forward_hook(lambda *_: seen.append(progress.bar.n))  # after the bar's own hook
    try:
        out = wrapped.answer_many(_requests(4))  # one call: the four items of one batch
    finally:
        handle.remove()
    assert len(out) == 4 and all(not isinstance(r, Exception) for r in out)
    assert len(seen) > 4 and seen == sorted(seen) and 0 < seen[0] < seen[-1] < 4  # moved before the call returned
    assert progress.bar.n == 4  # the call's items, once it returned
    for _ in range(4):
        progress.item_written()
    assert progress.bar.n == 4
    progress.close()
