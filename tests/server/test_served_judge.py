"""The seams the server holds: a :class:`ServedJudge` (the rubrics' ``JudgeLike`` plus the wire),
whose ``check_model`` is the one model check, over any engine that is a :class:`Backend`.

The type-level half runs mypy on the stand-ins the tests use (the suite itself is not type
checked): the scripted engine is a ``Backend``, a ``Judge`` over it a ``ServedJudge``, and a
stand-in that lacks a member is refused (so the check can fail).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from server_helpers import BODY
from support.scripted import ScriptedEngine

from logitjudge.errors import UnknownModelError
from logitjudge.judge import Judge
from logitjudge.rubrics.judgelike import JudgeLike
from logitjudge.server.app import create_app
from logitjudge.server.judgelike import ServedJudge

TESTS = Path(__file__).resolve().parents[1]


def test_a_judge_over_a_stand_in_engine_is_a_served_judge() -> None:
    judge = Judge(ScriptedEngine(name="scripted-1"))
    assert isinstance(judge, ServedJudge) and isinstance(judge, JudgeLike)
    assert not isinstance(SimpleNamespace(answer_many=judge.answer_many), ServedJudge)
    judge.check_model("scripted-1")
    judge.check_model("jev-latest")
    with pytest.raises(UnknownModelError) as raised:
        judge.check_model("nope")
    assert raised.value.served == "scripted-1" and raised.value.field == ("model",)


def test_the_server_asks_the_judge_it_holds_for_the_model_check() -> None:
    """A judge that serves one more name is obeyed by both APIs: the check is the judge's."""

    class AlsoServesOld(Judge):
        def check_model(self, requested: str) -> None:
            if requested != "old-name":
                super().check_model(requested)

    judge = AlsoServesOld(ScriptedEngine(name="scripted-1"))
    item = {"input": "q", "output": "a", "context": ["c"]}
    with TestClient(create_app(judge), raise_server_exceptions=False) as client:
        assert client.post("/v1/systemone", json={**BODY, "model": "old-name"}).status_code == 200
        ok = client.post("/api/v1/evaluate", json={"evaluators": ["faithfulness"], "model": "old-name", **item})
        assert ok.status_code == 200 and ok.json()["model"] == "scripted-1"
        assert client.post("/v1/systemone", json={**BODY, "model": "other"}).status_code == 400
        refused = client.post("/api/v1/evaluate", json={"evaluators": ["faithfulness"], "model": "other", **item})
        assert refused.status_code == 400


def test_the_server_holds_the_judge_counters_and_close_through_the_backend() -> None:
    engine = ScriptedEngine()
    judge = Judge(engine)
    assert judge.counters() == {} and judge.evaluator_scalings == {}
    judge.close()  # nothing to release, and no probe for it either
    assert judge.engine is engine


STAND_INS = """
from typing import Any

from support.scripted import ScriptedEngine

from logitjudge.engine.backend import Backend
from logitjudge.judge import Judge
from logitjudge.rubrics.judgelike import JudgeLike
from logitjudge.server.judgelike import ServedJudge


class NoClose:
    name = "partial"
    calibration = None

    def describe(self) -> dict[str, Any]:
        return {}


engine: Backend = ScriptedEngine()
judge: ServedJudge = Judge(engine)
plain: JudgeLike = judge
partial: Backend = NoClose()  # refused: line 22
"""


def test_the_stand_ins_satisfy_the_protocols_under_mypy(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    (tmp_path / "support").symlink_to(TESTS / "support")  # only the helpers: tests/vllm would shadow vllm
    check = tmp_path / "check_stand_ins.py"
    check.write_text(textwrap.dedent(STAND_INS).lstrip())
    out, err, status = api.run(
        [
            "--python-version",
            "3.11",
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            str(check),
        ]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1, out + err
    assert len(errors) == 1, out
    assert errors[0].startswith(f"{check}:22:") and '"NoClose"' in errors[0] and '"Backend"' in errors[0], out
