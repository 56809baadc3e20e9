"""A decision checkpoint (a model directory with ``decision_template.jinja`` and ``decision.json``)
is served with its own prompt on the vLLM backend too: the same answers as the transformers
backend on the same directory, which ``tests/engine/test_decision.py`` checks against
transformers' ``pipeline("decision")``."""

from __future__ import annotations

import json

import pytest
from support.decision import TEMPLATE

from logitjudge.engine.model import resolve_model

REQUEST = {
    "model": "jev-latest",
    "state": "Hi team, I was charged twice for order 1182 and would like a refund of the second charge today.",
    "questions": {
        "refund": {
            "type": "noul",
            "instructions": "Is a refund requested?",
            "criteria": {"true": "Money back", "false": None},
        },
        "tone": {
            "type": "choice",
            "instructions": "What is the tone?",
            "criteria": {"calm": None, "pushy": "Pressure"},
        },
        "urgency": {
            "type": "score",
            "instructions": "How urgent is it?",
            "criteria": ["Can wait", "This week", "Today"],
        },
    },
}


@pytest.fixture(scope="module")
def decision_dir(tmp_path_factory):
    """The default model's files (linked) with a decision template and a decision.json.
    The engines here are started and closed in the test (1 GiB of KV cache, as the others)."""
    source, _ = resolve_model(None)
    path = tmp_path_factory.mktemp("decision-checkpoint")
    for f in source.iterdir():
        (path / f.name).symlink_to(f)
    (path / "decision_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    config = {"temperature": {"choice": 2.0, "score": 0.5}, "noul_options": ["false", "true"]}
    (path / "decision.json").write_text(json.dumps(config), encoding="utf-8")
    return path


def _decision_templates_supported() -> bool:
    import inspect

    from transformers import PreTrainedTokenizerBase

    return "sanitize_control_tokens" in inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters


def test_vllm_serves_a_decision_checkpoint_with_its_own_prompt_or_refuses_it(decision_dir):
    """Never the engine's own prompt in place of the checkpoint's: with a transformers that
    renders decision templates (>= 5.24) the answers equal the transformers backend's; with the
    older one vLLM pins, loading is refused naming the version."""
    from logitjudge import Judge
    from logitjudge.engine.config import VllmConfig
    from logitjudge.errors import UnsupportedModelError

    def vllm_judge() -> Judge:
        return Judge.load(str(decision_dir), backend="vllm", default_rotations=1, vllm=VllmConfig(kv_cache_gib=1))

    if not _decision_templates_supported():
        with pytest.raises(UnsupportedModelError, match=r"decision_template\.jinja needs transformers >= 5\.24"):
            vllm_judge()
        return
    ours = Judge.load(str(decision_dir), default_rotations=1)
    try:
        expected = ours.ask(REQUEST)
    finally:
        ours.close()
    judge = vllm_judge()
    try:
        version = judge.describe()["prompt_version"]
        got = judge.ask(REQUEST)
    finally:
        judge.close()
    assert version.startswith("decision-template-")
    for key, answer in expected["answers"].items():
        probs = answer.get("probabilities") or {"p": answer["noul"]}
        other = got["answers"][key].get("probabilities") or {"p": got["answers"][key]["noul"]}
        assert other == pytest.approx(probs, abs=1e-4), key
