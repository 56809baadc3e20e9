"""Decision checkpoints: a model directory's ``decision.json`` and ``decision_template.jinja`` are
honoured, and the answers equal transformers' ``pipeline("decision")`` on the same tiny model and
template (the pipeline asks each question in its own forward pass; the engine packs them over one
state prefix, so equality is also the isolation check)."""

from __future__ import annotations

import json

import pytest
import torch
from support.decision import TEMPLATE

from logitjudge.engine.core import Engine
from logitjudge.engine.decision import DecisionPromptBuilder
from logitjudge.engine.model import LoadedModel
from logitjudge.engine.types import EngineRequest, Option, Question
from logitjudge.errors import InvalidRequestError, UnsupportedModelError

STATE = "Hi team, I was charged twice for order 1182 and would like a refund of the second charge today."
REQUEST = {
    "state": STATE,
    "questions": {
        "refund": {
            "type": "noul",
            "instructions": "Is a refund requested?",
            "criteria": {"true": "The customer asks for money back", "false": None},
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


def _engine_request() -> EngineRequest:
    qs = REQUEST["questions"]
    return EngineRequest(
        STATE,
        (
            Question(
                "noul",
                qs["refund"]["instructions"],
                (Option("true", "The customer asks for money back"), Option("false")),
            ),
            Question("choice", qs["tone"]["instructions"], (Option("calm"), Option("pushy", "Pressure"))),
            Question(
                "score",
                qs["urgency"]["instructions"],
                tuple(Option(str(i), d) for i, d in enumerate(qs["urgency"]["criteria"])),
            ),
        ),
    )


@pytest.fixture(scope="module")
def decision_dir(tmp_path_factory, tokenizer, make_tiny_model):
    """A tiny random Llama saved with its tokenizer, a decision template and a decision.json
    (temperatures and the noul options in the order false, true)."""
    path = tmp_path_factory.mktemp("decision-model")
    model = make_tiny_model("llama")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "decision_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    config = {"temperature": {"choice": 2.0, "score": 0.5}, "noul_options": ["false", "true"]}
    (path / "decision.json").write_text(json.dumps(config), encoding="utf-8")
    return path, model


def _load(path, model) -> Engine:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    lm = LoadedModel(model, tok, "tiny-decision", str(path), torch.device("cpu"), torch.float32, "tiny-decision")
    return Engine(lm, dtype="float32")  # the pipeline runs fp32


def test_the_engine_answers_as_the_decision_pipeline(decision_dir):
    from transformers import AutoTokenizer, pipeline

    path, model = decision_dir
    engine = _load(path, model)
    assert isinstance(engine.prompt, DecisionPromptBuilder)
    assert engine.describe()["prompt_version"].startswith("decision-template-")
    ours = engine.run_batch([_engine_request()])[0]
    decide = pipeline("decision", model=model, tokenizer=AutoTokenizer.from_pretrained(path), decision_config=str(path))
    theirs = decide(json.loads(json.dumps(REQUEST)))
    noul, choice, score = ours.answers
    assert noul.probabilities[0] == pytest.approx(theirs["refund"]["noul"], abs=1e-4)
    assert list(choice.probabilities) == pytest.approx(
        [theirs["tone"]["probabilities"][k] for k in ("calm", "pushy")], abs=1e-4
    )
    assert list(score.probabilities) == pytest.approx(
        [theirs["urgency"]["probabilities"][str(i)] for i in range(3)], abs=1e-4
    )
    # random weights give answers far from uniform, so the equality above is not one of two flat answers
    assert max(abs(p - 1 / 3) for p in score.probabilities) > 0.05
    plain = engine.plan(_engine_request())
    assert [q.temperature for q in plain.questions] == [1.0, 2.0, 0.5]
    # the state is the shared prefix: run once, each question only its own branch
    assert plain.prefix and all(len(v.branch) > 0 for q in plain.questions for v in q.views)


def test_the_noul_options_reach_the_template_in_the_settings_order(decision_dir):
    path, model = decision_dir
    engine = _load(path, model)
    (view,) = engine.prompt.views(_engine_request().questions[0], STATE, engine.prompt.prefix_ids(STATE))
    assert view.option_index == (1, 0)  # "false" is shown first, with the first label (Yes)
    text = engine.lm.tokenizer.decode(list(view.branch))
    assert "Yes. false" in text and "No. true: The customer asks for money back" in text


def test_a_continuation_is_refused_with_a_decision_template(decision_dir):
    path, model = decision_dir
    engine = _load(path, model)
    request = EngineRequest(STATE, (Question("continuation", "Write.", (Option("a refund"),)),))
    with pytest.raises(InvalidRequestError, match="continuation"):
        engine.plan(request)


def test_a_template_reading_every_question_at_once_is_refused(tmp_path):
    from logitjudge.engine.decision import read_decision_settings

    (tmp_path / "decision_template.jinja").write_text("{% for q in questions %}{{ q.instructions }}{% endfor %}")
    with pytest.raises(UnsupportedModelError, match="see each other"):
        read_decision_settings(tmp_path)
    (tmp_path / "decision_template.jinja").write_text(TEMPLATE)
    (tmp_path / "decision.json").write_text(json.dumps({"noul_options": ["true", "maybe"]}))
    with pytest.raises(UnsupportedModelError, match="noul_options"):
        read_decision_settings(tmp_path)
    (tmp_path / "decision.json").unlink()
    (tmp_path / "decision_template.jinja").unlink()
    assert read_decision_settings(tmp_path) is None  # no template: the engine's own prompt


def test_a_decision_json_without_a_template_is_named_and_not_used(tmp_path, tokenizer, caplog):
    from logitjudge.engine.decision import question_prompt
    from logitjudge.engine.prompt import PromptBuilder

    (tmp_path / "decision.json").write_text(json.dumps({"temperature": {"choice": 2.0}}))
    with caplog.at_level("WARNING", logger="logitjudge.engine.decision"):
        prompt = question_prompt(str(tmp_path), tokenizer, "lj-prompt-1.1")
    assert isinstance(prompt, PromptBuilder) and prompt.temperature("choice") == 1.0
    assert "decision.json without decision_template.jinja is not used" in caplog.text
