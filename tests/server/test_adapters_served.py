"""A branch adapter saved by PEFT itself serves through both APIs on the embedded 135M.

``/v1/systemone``: a question with ``x_adapter`` gets PEFT's activated-LoRA answer (1e-4) and its
siblings keep the answers they have without it (1e-6); an unknown adapter is a 4xx naming the
question's field (422). ``/api/v1/evaluate``: an adapter bound to ``faithfulness@2`` answers that
evaluator's per-claim questions (its score moves to PEFT's answer and its contrast twin is not
asked), and nothing else moves.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from fastapi.testclient import TestClient
from support.adapters import peft_folder

from logitjudge.engine.core import Engine
from logitjudge.engine.model import LoadedModel
from logitjudge.engine.types import EngineRequest, Option, Question
from logitjudge.judge import Judge
from logitjudge.server.app import create_app

peft = pytest.importorskip("peft")

STATE = "The parcel arrived broken and I want my money back."
BODY = {
    "model": "jev-latest",
    "state": STATE,
    "questions": {
        "refund": {"type": "noul", "instructions": "Does the customer want a refund?", "x_adapter": "grounded"},
        "team": {"type": "choice", "criteria": {"Billing": None, "Shipping": "deliveries"}},
    },
}
ITEM = {
    "input": "When was the bridge opened?",
    "output": "The bridge opened in 1932. It is painted red.",
    "context": ["The Harbour Bridge was opened in March 1932.", "It carries rail, vehicle and foot traffic."],
}


@pytest.fixture(scope="module")
def judges(default_judge, tmp_path_factory):
    """(judge with the PEFT-made adapter loaded, the same weights without it, PEFT's model)."""
    lm0 = default_judge.engine.lm
    base = copy.deepcopy(lm0.model).float().eval()
    folder = peft_folder(
        base, tmp_path_factory.mktemp("adapter") / "grounded", name="grounded", evaluator="faithfulness@2", seed=3
    )
    in_peft = peft.PeftModel.from_pretrained(copy.deepcopy(base), str(folder)).eval()

    def judge(model) -> Judge:
        lm = LoadedModel(model, lm0.tokenizer, lm0.name, lm0.source, lm0.device, torch.float32, lm0.fingerprint)
        return Judge(Engine(lm, dtype="float32"), default_rotations=1)

    with_adapter, without = judge(base), judge(copy.deepcopy(base))
    with_adapter.engine.load_adapters([folder])
    return with_adapter, without, in_peft


def _peft_noul(in_peft, engine: Engine, question: Question, state) -> float:
    plan = engine.plan(EngineRequest(state, (question,)))
    (view,) = plan.questions[0].views
    with torch.no_grad():
        logits = in_peft(input_ids=torch.tensor([plan.prefix + view.branch]), alora_offsets=[len(view.branch)])
    last = logits.logits[0, -1].float()
    p = torch.softmax(torch.stack([last[lab[0]] for lab in view.labels]), 0)
    return float(p[view.option_index.index(0)])


def test_systemone_question_names_an_adapter(judges):
    with_adapter, without, in_peft = judges
    with TestClient(create_app(with_adapter)) as c, TestClient(create_app(without)) as plain:
        got = c.post("/v1/systemone", json=BODY)
        assert got.status_code == 200, got.text
        bare = {**BODY, "questions": {**BODY["questions"], "refund": {**BODY["questions"]["refund"]}}}
        del bare["questions"]["refund"]["x_adapter"]
        ref = plain.post("/v1/systemone", json=bare).json()
        unknown = {**BODY, "questions": {"refund": {**BODY["questions"]["refund"], "x_adapter": "nope"}}}
        err = c.post("/v1/systemone", json=unknown)
        models = c.get("/healthz").json()
    a = got.json()["answers"]
    q = Question("noul", "Does the customer want a refund?", (Option("true", None), Option("false", None)))
    assert abs(a["refund"]["noul"] - _peft_noul(in_peft, with_adapter.engine, q, STATE)) <= 1e-4
    assert abs(a["refund"]["noul"] - ref["answers"]["refund"]["noul"]) > 1e-3  # the adapter did something
    for name, p in a["team"]["probabilities"].items():
        assert abs(p - ref["answers"]["team"]["probabilities"][name]) <= 1e-6
    assert err.status_code == 422, err.text
    assert err.json()["detail"][0]["loc"] == ["body", "questions", "refund", "adapter"]
    assert "grounded" in json.dumps(models)


def test_evaluate_reads_the_adapter_bound_to_the_evaluator(judges):
    with_adapter, without, _ = judges
    body = {"evaluators": ["faithfulness", "chunk_relevance"], **ITEM}
    with TestClient(create_app(with_adapter)) as c, TestClient(create_app(without)) as plain:
        got = c.post("/api/v1/evaluate", json=body)
        ref = plain.post("/api/v1/evaluate", json=body)
    assert got.status_code == 200 and ref.status_code == 200, got.text
    by, ref_by = got.json()["results"], ref.json()["results"]
    assert abs(by["faithfulness"]["score"] - ref_by["faithfulness"]["score"]) > 1e-3
    assert abs(by["chunk_relevance"]["score"] - ref_by["chunk_relevance"]["score"]) <= 1e-6


def test_a_calibration_fitted_on_the_base_readout_leaves_the_adapted_score_alone(judges):
    """The shipped kind of calibration (a noul bucket temperature and a Platt scaling of
    faithfulness@2's score, both fitted on the base model's answers) does not reach the score an
    adapter gives: the adapter was trained on its raw label logits."""
    from logitjudge.engine.calibration import Calibration, Scaling

    with_adapter, _, _ = judges
    engine = with_adapter.engine
    body = {"evaluators": ["faithfulness"], **ITEM}
    with TestClient(create_app(with_adapter)) as c:
        raw = c.post("/api/v1/evaluate", json=body).json()["results"]["faithfulness"]["score"]
        fitted = {k: engine.describe()[k] for k in ("fingerprint", "prompt_version", "dtype", "strategy")}
        engine.set_calibration(
            Calibration(
                fitted_for=fitted,
                scalings={"noul:2": Scaling(0.3)},
                evaluators={"faithfulness@2": Scaling(0.9, (-1.4, 0.0))},
            )
        )
        try:
            assert with_adapter.evaluator_scalings  # the scaling is there to be applied
            got = c.post("/api/v1/evaluate", json=body).json()["results"]["faithfulness"]["score"]
        finally:
            engine.set_calibration(None)
    assert abs(got - raw) <= 1e-6
