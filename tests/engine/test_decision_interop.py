"""Ecosystem decision checkpoints: a ``JevForDecision`` saved by transformers itself, and a base
model with a decision head beside its weights (JEV's ``head.safetensors`` + ``judge_config.json``
+ ``calibration.json``, vLLM deciders' ``readout.safetensors`` + ``decision_config.json``), load
through ``Engine.load`` / ``Judge.load`` and answer as transformers' ``pipeline("decision")`` does
on the same folder: packed, from the state cache and in separate passes, and through
``POST /v1/systemone``. Everything is built in ``tmp_path`` with random weights (no hub)."""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from logitjudge.contract import systemone as schemas
from logitjudge.convert import wire_to_engine
from logitjudge.engine.core import Engine
from logitjudge.engine.decision import DecisionPromptBuilder, question_prompt
from logitjudge.engine.prompt import PromptBuilder
from logitjudge.engine.types import EngineRequest, Option, Question
from logitjudge.errors import InvalidRequestError, UnsupportedModelError

TOL = 1e-4
STATES: list[Any] = [
    "Hi team, I was charged twice for order 1182 and would like a refund of the second charge today.",
    {"ticket": 1182, "message": "The parcel arrived broken; send a new one or my money back.", "tier": "gold"},
]
QUESTIONS: dict[str, Any] = {
    "refund": {
        "type": "noul",
        "instructions": "Is a refund requested?",
        "criteria": {"true": "The customer asks for money back", "false": None},
    },
    "tone": {"type": "choice", "instructions": "What is the tone?", "criteria": {"calm": None, "pushy": "Pressure"}},
    "team": {
        "type": "choice",
        "instructions": "Which team should handle it?",
        "criteria": {"Billing": "payments", "Shipping": None, "Tech": "bugs", "Sales": None},
    },
    "urgency": {"type": "score", "instructions": "How urgent is it?", "criteria": ["Can wait", "This week", "Today"]},
}
LAYOUTS = ("JevForDecision", "head.safetensors", "readout.safetensors")


def _text_config(vocab: int) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=0.5,
        tie_word_embeddings=True,
    )


def _save_jev(path: Path, tokenizer: Any) -> None:
    """(a) transformers' own ``JevForDecision``, random, saved with ``save_pretrained`` (no template:
    the pipeline's generic prompt; temperatures in its ``decision.json``)."""
    from transformers import JevConfig, JevForDecision
    from transformers.decision import DecisionConfig

    torch.manual_seed(0)
    config = JevConfig(
        hidden_size=64, text_config=_text_config(len(tokenizer)).to_dict(), softcap=8.0, initializer_range=0.5
    )
    model = JevForDecision(config).eval()
    with torch.no_grad():  # scores spread enough to be far from flat, not so far that they saturate
        model.proj.weight.normal_(0, 0.3)
        model.proj.bias.normal_(0, 0.5)
    model.decision_config = DecisionConfig(temperature={"choice": 2.0, "score": 0.5})
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def _save_base(path: Path, tokenizer: Any, layout: str) -> None:
    """(b) a base Qwen2 saved by transformers, and a head beside its weights in ``layout``."""
    from safetensors.torch import save_file
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(1)
    Qwen2ForCausalLM(_text_config(len(tokenizer))).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    g = torch.Generator().manual_seed(2)
    if layout == "head.safetensors":  # JEV: 24 slots (noul 0-1, score 2-7, choice 8-23), soft cap, temperatures
        head = {"proj.weight": torch.randn(24, 64, generator=g) * 0.3, "proj.bias": torch.randn(24, generator=g) * 0.5}
        save_file(head, str(path / layout))
        verbalizers = ["yes", "no", *(str(i) for i in range(6)), *"ABCDEFGHIJKLMNOP"]
        slots = {"verbalizers": verbalizers, "ranges": {"noul": [0, 2], "score": [2, 8], "choice": [8, 24]}}
        judge = {"slots": {**slots, "num_slots": 24}, "softcap": 10.0, "adapter_subfolder": None}
        (path / "judge_config.json").write_text(json.dumps(judge), encoding="utf-8")
        temperatures = {"per_kind": {"noul": 1.5, "choice": 0.8, "score": 1.2}}
        (path / "calibration.json").write_text(json.dumps(temperatures), encoding="utf-8")
    else:  # a vLLM decider: one slot per code for every type, no bias, its own system prompt
        save_file({"weight": torch.randn(6, 64, generator=g) * 0.3}, str(path / layout))
        decider = {"codes": list("ABCDEF"), "temperature": 1.3, "prompt": "d3"}
        (path / "decision_config.json").write_text(json.dumps(decider), encoding="utf-8")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tokenizer) -> dict[str, Path]:
    out = {}
    for layout in LAYOUTS:
        path = tmp_path_factory.mktemp(layout.replace(".", "-"))
        _save_jev(path, tokenizer) if layout == "JevForDecision" else _save_base(path, tokenizer, layout)
        out[layout] = path
    return out


@pytest.fixture(scope="module")
def engines(checkpoints) -> dict[str, Engine]:
    return {layout: Engine.load(str(path), dtype="float32", self_check=True) for layout, path in checkpoints.items()}


def _pipeline_answers(path: Path) -> list[dict[str, Any]]:
    from transformers import pipeline

    decide = pipeline("decision", model=str(path))  # loads JevForDecision itself, from the folder's files
    return [decide(copy.deepcopy({"state": state, "questions": QUESTIONS})) for state in STATES]


def _flat(answers: dict[str, Any]) -> list[float]:
    """Every probability of a response's answers (pipeline's or ours), in one order."""
    out = []
    for name, question in QUESTIONS.items():
        answer = answers[name]
        if question["type"] == "noul":
            out.append(answer["noul"])
        else:
            names = question["criteria"] if question["type"] == "choice" else map(str, range(3))
            out += [answer["probabilities"][k] for k in names]
    return out


def _request(state: Any) -> EngineRequest:
    """The wire request's engine form, with System One's default rotations (a head reads one order)."""
    body = {"model": "jev-latest", "state": state, "questions": QUESTIONS}
    return wire_to_engine(schemas.SystemOneRequest.model_validate(body), default_rotations=8)


def _engine_flat(engine: Engine, strategy: str) -> list[list[float]]:
    requests = [_request(s) for s in STATES]
    results = engine.run_batch(requests, strategy)
    out = []
    for result in results:
        assert not isinstance(result, Exception), result
        flat = []
        for answer in result.answers:
            flat += [answer.probabilities[0]] if answer.type == "noul" else list(answer.probabilities)
        out.append(flat)
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_engine_answers_as_the_decision_pipeline(layout, checkpoints, engines):
    engine = engines[layout]
    assert isinstance(engine.prompt, DecisionPromptBuilder) and engine.prompt.head is not None
    assert engine.prompt.head.layout == layout
    assert engine.describe()["prompt_version"].startswith("decision-head-")
    theirs = [_flat(a) for a in _pipeline_answers(checkpoints[layout])]
    flat = [p for row in theirs for p in row]
    # random weights give answers neither flat nor saturated, so equality is no accident of either
    assert max(abs(p - 0.5) for p in flat) > 0.1 and sum(0.02 < p < 0.98 for p in flat) >= len(flat) // 2
    strategies = ["packed", "prefix_packed", "prefix_packed", "separate"]  # the second reads the state cache
    for strategy in strategies:
        ours = _engine_flat(engine, strategy)
        for got, want in zip(ours, theirs):
            assert got == pytest.approx(want, abs=TOL), strategy


def test_the_head_scores_its_slots_in_one_order_and_adds_no_tokens(engines):
    engine = engines["head.safetensors"]
    request = _request(STATES[0])
    plan = engine.plan(request)
    noul, tone, team, urgency = plan.questions
    assert all(len(q.views) == 1 for q in plan.questions)  # the head reads the template's order only
    assert [lab for lab in noul.views[0].labels] == [(0,), (1,)]  # JEV's noul slots, false first
    assert noul.views[0].option_index == (1, 0)
    assert [lab for lab in team.views[0].labels] == [(8,), (9,), (10,), (11,)]
    assert [lab for lab in urgency.views[0].labels] == [(2,), (3,), (4,)]
    assert [q.temperature for q in plan.questions] == [1.5, 0.8, 0.8, 1.2]
    # single-slot labels: tokens are the prefix and the branches, nothing read beyond them
    assert plan.n_tokens == len(plan.prefix) + sum(len(q.views[0].branch) for q in plan.questions)
    result = engine.run_batch([request])[0]
    assert all(a.option_mass == pytest.approx(1.0, abs=1e-5) for a in result.answers)


def test_the_generic_prompt_is_the_pipelines_token_for_token(checkpoints, engines):
    from transformers import AutoTokenizer
    from transformers.decision import DecisionConfig

    path, engine = checkpoints["JevForDecision"], engines["JevForDecision"]
    config = DecisionConfig.from_pretrained(str(path))
    assert config.chat_template is None  # save_pretrained wrote no template: the generic prompt
    body = {"state": STATES[1], "questions": QUESTIONS}
    prompts = config.prepare_inputs(copy.deepcopy(body), AutoTokenizer.from_pretrained(path))
    plan = engine.plan(_request(STATES[1]))
    for (inputs, _), question in zip(prompts, plan.questions):
        theirs = inputs["input_ids"][0].tolist()
        assert list(plan.prefix) + list(question.views[0].branch) == theirs
        assert int(inputs["marks"][0]) == len(theirs)  # read at the last token, as the branch's labels are


@pytest.mark.parametrize("layout", ["JevForDecision", "head.safetensors"])
def test_served_through_systemone_as_the_pipeline(layout, checkpoints):
    from fastapi.testclient import TestClient

    from logitjudge import Judge
    from logitjudge.server.app import create_app

    judge = Judge.load(str(checkpoints[layout]), dtype="float32")  # what `logitjudge serve --model DIR` loads
    assert judge.engine.prompt.head is not None
    theirs = _pipeline_answers(checkpoints[layout])
    with TestClient(create_app(judge)) as client:
        for state, want in zip(STATES, theirs):
            r = client.post("/v1/systemone", json={"model": "jev-latest", "state": state, "questions": QUESTIONS})
            assert r.status_code == 200, r.text
            answers = r.json()["answers"]
            assert _flat(answers) == pytest.approx(_flat(want), abs=TOL)
            assert answers["team"]["choice"] == want["team"]["choice"]
        too_many = {"type": "choice", "criteria": {f"o{i}": None for i in range(17)}}
        r = client.post("/v1/systemone", json={"model": "jev-latest", "state": "x", "questions": {"q": too_many}})
        assert r.status_code == 422 and "at most 16 options" in r.text


def test_refusals(checkpoints, engines, tokenizer, tmp_path):
    engine = engines["JevForDecision"]
    continuation = Question("continuation", "Reply:", (Option("Sure."),))
    with pytest.raises(InvalidRequestError, match="continuation"):
        engine.plan(EngineRequest(STATES[0], (continuation,)))
    many = Question("choice", "Which?", tuple(Option(f"o{i}") for i in range(17)))
    with pytest.raises(InvalidRequestError, match="decision head scores at most 16 options"):
        engine.plan(EngineRequest(STATES[0], (many,)))
    source = checkpoints["head.safetensors"]
    with pytest.raises(UnsupportedModelError, match="transformers backend only"):
        question_prompt(str(source), tokenizer, "lj-prompt-1.1", decision_heads=False)  # what vLLM asks
    lora = tmp_path / "lora"  # JEV's default: a LoRA in adapter/, which this engine does not load
    lora.mkdir()
    for name in ("config.json", "head.safetensors", "calibration.json"):
        shutil.copy(source / name, lora / name)
    judge = json.loads((source / "judge_config.json").read_text())
    del judge["adapter_subfolder"]
    (lora / "judge_config.json").write_text(json.dumps(judge))
    with pytest.raises(UnsupportedModelError, match="adapter"):
        question_prompt(str(lora), tokenizer, "lj-prompt-1.1")


def test_head_files_beside_a_model_transformers_maps_to_no_decision_model_are_not_used(
    checkpoints, tokenizer, make_tiny_model, tmp_path, caplog
):
    make_tiny_model("llama").save_pretrained(tmp_path)  # llama: no decision model in transformers' mapping
    for name in ("head.safetensors", "judge_config.json", "calibration.json"):
        shutil.copy(checkpoints["head.safetensors"] / name, tmp_path / name)
    with caplog.at_level(logging.WARNING, logger="logitjudge.engine.interop"):
        prompt = question_prompt(str(tmp_path), tokenizer, "lj-prompt-1.1")
    assert isinstance(prompt, PromptBuilder)
    assert "are not used" in caplog.text and "llama" in caplog.text
