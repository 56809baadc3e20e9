"""Answers with low ``x_option_mass`` are flagged by ``serve``: one WARNING per request (no state
text, no key) and ``logitjudge_low_option_mass_answers_total{type}`` in ``/metrics``.

Regression: an 8,192-token state got ``x_option_mass`` 0.0019 (the model put 0.2 % of its
probability on the answer labels) and nothing said so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from server_helpers import BODY, rising
from support.scripted import ScriptedEngine

from logitjudge import Judge
from logitjudge.engine.types import Answer, EngineRequest, EngineResult
from logitjudge.errors import LogitJudgeError
from logitjudge.server.app import create_app

MARKER = "low-mass-state-9c2e"
KEY = "low-mass-key-41d7"
THRESHOLD = 0.05  # logitjudge.settings.LOW_OPTION_MASS (checked below)


class LowMassEngine(ScriptedEngine):
    """Scripted answers; in a state containing "LOWMASS" the noul and choice answers get mass
    0.0019 (the score answer keeps 1.0), and at "EDGE" every answer gets exactly the threshold."""

    def run_batch(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        out = list(super().run_batch(requests))
        for i, (req, res) in enumerate(zip(requests, out)):
            if not isinstance(res, EngineResult):
                continue
            if "LOWMASS" in str(req.state):
                answers = tuple(
                    replace(a, option_mass=0.0019) if a.type in ("noul", "choice") else a for a in res.answers
                )
                out[i] = replace(res, answers=answers)
            elif "EDGE" in str(req.state):
                out[i] = replace(res, answers=tuple(replace(a, option_mass=THRESHOLD) for a in res.answers))
        return out


def test_low_option_mass_flags_answers_strictly_below_the_threshold() -> None:
    from logitjudge.server.metrics import low_option_mass
    from logitjudge.settings import LOW_OPTION_MASS

    assert LOW_OPTION_MASS == THRESHOLD
    answers = [
        Answer("noul", (0.5, 0.5), option_mass=0.0019),
        Answer("choice", (0.4, 0.6), option_mass=0.05),  # at the threshold: not flagged
        Answer("score", (0.2, 0.8), option_mass=0.0499),
        Answer("choice", (0.5, 0.5), option_mass=float("nan")),  # no mass to judge
        Answer("noul", (0.9, 0.1), option_mass=0.9),
    ]
    assert low_option_mass(answers) == [(0, "noul", 0.0019), (2, "score", 0.0499)]
    assert low_option_mass(answers, threshold=0.001) == []


def test_serve_warns_and_counts_answers_with_low_option_mass(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    app = create_app(Judge(LowMassEngine(rising, name="scripted-1")), api_keys=[KEY])
    auth = {"Authorization": f"Bearer {KEY}"}
    with TestClient(app) as c:
        for state in ("a calm parcel", f"EDGE {MARKER}"):  # mass 1.0, then exactly the threshold
            assert c.post("/v1/systemone", json={**BODY, "state": state}, headers=auth).status_code == 200
        assert not [r for r in caplog.records if "option mass" in r.getMessage()]

        r = c.post("/v1/systemone", json={**BODY, "state": f"LOWMASS {MARKER}"}, headers=auth)
        assert r.status_code == 200, r.text
        answers = r.json()["answers"]
        assert answers["refund"]["x_option_mass"] == 0.0019 and answers["anger"]["x_option_mass"] == 1.0
        item = {"input": "Refund?", "output": f"LOWMASS {MARKER}", "context": ["Refunds take 30 days."]}
        ev = c.post("/api/v1/evaluate", json={"evaluators": ["chunk_relevance@1"], **item}, headers=auth)
        assert ev.status_code == 200, ev.text
        metrics = c.get("/metrics").text

    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "option mass" in r.getMessage()]
    assert len(warnings) == 2, [w.getMessage() for w in warnings]  # one per request, both APIs
    first = warnings[0].getMessage()
    assert "2 of 3 answers" in first and "question 0 (noul) 0.0019" in first and "question 1 (choice)" in first
    assert "0.05" in first
    assert MARKER not in caplog.text and KEY not in caplog.text  # no state text, no key
    # chunk_relevance asks one noul per chunk: 1 + 1 noul answers flagged, 1 choice
    assert 'logitjudge_low_option_mass_answers_total{type="noul"} 2.0' in metrics
    assert 'logitjudge_low_option_mass_answers_total{type="choice"} 1.0' in metrics
    assert 'logitjudge_low_option_mass_answers_total{type="score"}' not in metrics
