"""``JudgeLike``: the judge surface of the rubrics and the CLI, satisfied by ``Judge`` (over the
scripted engine here) and by the CLI's progress wrapper, and read directly (no ``getattr`` probes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support.scripted import ScriptedEngine

from logitjudge.cli.progress import ItemProgress
from logitjudge.errors import UnknownModelError
from logitjudge.judge import Judge
from logitjudge.rubrics.api import evaluate
from logitjudge.rubrics.judgelike import JudgeLike

ITEM = {"id": "a", "output": "30 days.", "context": ["Refunds within 30 days."]}


def test_the_scripted_judge_and_the_progress_wrapper_are_judgelike():
    judge = Judge(ScriptedEngine(lambda s, q: [0.8, 0.2]), default_rotations=2)
    assert isinstance(judge, JudgeLike)
    wrapped = ItemProgress(1, 0, 1, 1, disable=False).wrap(judge)
    assert isinstance(wrapped, JudgeLike)
    assert (wrapped.model_name, wrapped.default_rotations, wrapped.evaluator_scalings) == ("scripted", 2, {})
    assert wrapped.describe() == judge.describe()
    with pytest.raises(UnknownModelError):
        wrapped.check_model("another-model")
    wrapped.check_model("jev-latest")
    assert not isinstance(SimpleNamespace(answer_many=lambda reqs: []), JudgeLike)


def test_evaluate_reads_the_judge_members():
    judge = Judge(ScriptedEngine(lambda s, q: [0.8, 0.2]))
    run = evaluate(judge, [ITEM], ["faithfulness"])
    assert run.model == "scripted" and run.results[0].results["faithfulness"].status == "ok"
    with pytest.raises(UnknownModelError):
        evaluate(judge, [ITEM], ["faithfulness"], model="another-model")
    with pytest.raises(AttributeError, match="check_model"):  # a stand-in must declare the whole surface
        evaluate(SimpleNamespace(answer_many=judge.answer_many), [ITEM], ["faithfulness"])  # type: ignore[arg-type]
