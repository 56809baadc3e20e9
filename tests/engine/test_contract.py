"""Contract shapes through the Python API (Judge.ask) on the default model: every answer type
field by field, unicode option names byte for byte, structured text, usage, renamed ids, and
typed errors that lose nothing else in the request."""

from __future__ import annotations

import json
import math

import pytest

from logitjudge import ContextOverflowError, InvalidRequestError, UnknownModelError
from logitjudge.contract import systemone as schemas
from logitjudge.engine.types import EngineRequest, Option, Question

TICKET = "Hi, I was charged twice for my March invoice (#4471). Please refund the duplicate. — Sam"
BASE = {
    "refund": {"type": "noul", "instructions": "Is the customer asking for a refund?"},
    "team": {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {"Billing": "payments and invoices", "Technical": None, "Sales": ["deals", "upgrades"]},
    },
    "anger": {
        "type": "score",
        "instructions": "How angry is the customer?",
        "criteria": ["Calm", "Frustrated", "Very angry"],
    },
}


def ask(judge, questions, state=TICKET, **extra):
    return judge.ask({"model": "jev-latest", "state": state, "questions": questions, **extra})


def test_answer_shapes_field_by_field(default_judge):
    r = ask(default_judge, BASE)
    schemas.SystemOneResponse.model_validate(r)
    json.dumps(r, allow_nan=False)  # finite everywhere
    assert set(r) == {"model", "answers", "usage"} and r["model"] == default_judge.model_name
    assert list(r["answers"]) == ["refund", "team", "anger"]
    noul = r["answers"]["refund"]
    assert set(noul) == {"type", "noul", "x_option_mass"} and 0 <= noul["noul"] <= 1  # no confidence
    ch = r["answers"]["team"]
    assert set(ch["probabilities"]) == {"Billing", "Technical", "Sales"}
    assert math.isclose(sum(ch["probabilities"].values()), 1, abs_tol=1e-6)
    assert ch["probabilities"][ch["choice"]] == max(ch["probabilities"].values())
    m, n = max(ch["probabilities"].values()), 3
    assert ch["confidence"] == pytest.approx((m - 1 / n) / (1 - 1 / n))
    sc = r["answers"]["anger"]
    assert sc["legend"] == {"0": "Calm", "1": "Frustrated", "2": "Very angry"}
    assert list(sc["probabilities"]) == ["0", "1", "2"]
    assert sc["score"] == pytest.approx(sum(int(k) * p for k, p in sc["probabilities"].items()))
    assert isinstance(r["usage"]["input_tokens"], int) and r["usage"]["input_tokens"] > 50
    assert r["usage"]["output_tokens"] == 0


def test_usage_counts_the_tokens_run(default_judge):
    one = ask(default_judge, {"a": BASE["refund"]})["usage"]["input_tokens"]
    two = ask(default_judge, {"a": BASE["refund"], "b": BASE["refund"]})["usage"]["input_tokens"]
    plan = default_judge.engine.plan(
        default_judge.to_engine(
            default_judge.validate({"model": "jev-latest", "state": TICKET, "questions": {"a": BASE["refund"]}})
        )
    )
    assert one == len(plan.prefix) + len(plan.questions[0].views[0].branch)
    assert two - one == len(plan.questions[0].views[0].branch)  # the state is counted once


def test_unicode_names_round_trip_byte_for_byte(default_judge):
    names = ["환불 요청", "배송 문의", "🙂 기타", "Cafe\u0301"]  # last one is NFD, must stay NFD
    r = ask(
        default_judge,
        {"질문": {"type": "choice", "criteria": {n: None for n in names}}},
        state="배송이 3일째 안 와요. 그냥 환불해 주세요 😡",
    )
    assert list(r["answers"]) == ["질문"]
    assert list(r["answers"]["질문"]["probabilities"]) == names


def test_structured_state_instructions_and_descriptions(default_judge):
    r = ask(
        default_judge,
        {
            "route": {
                "type": "choice",
                "instructions": {"task": "Route the ticket", "include": ["team"]},
                "criteria": {"billing": {"owns": ["refunds", "invoices"]}, "tech": ["bugs", "outages"]},
            },
            "mood": {
                "type": "score",
                "instructions": ["Rate the mood.", "Be strict."],
                "criteria": [{"label": "Calm"}, {"label": "Very angry", "signals": ["threats"]}],
            },
            "bare": {"type": "noul", "criteria": {"true": "The ticket mentions money"}},
        },
        state={"ticket": TICKET, "tags": ["billing"]},
    )
    assert r["answers"]["mood"]["legend"]["1"] == {"label": "Very angry", "signals": ["threats"]}
    assert set(r["answers"]["route"]["probabilities"]) == {"billing", "tech"}
    ask(default_judge, {"q": BASE["refund"]}, state=["line one", {"k": 1}])


def test_renamed_ids_give_identical_answers(default_judge):
    a = ask(default_judge, BASE)["answers"]
    renamed = dict(zip(["zz-renamed.1", "Q 🙂", "x_y_z"], BASE.values()))
    b = ask(default_judge, renamed)["answers"]
    for (_, x), (_, y) in zip(a.items(), b.items()):
        assert x == y


@pytest.mark.parametrize(
    "question,field",
    [
        ({"type": "choice", "criteria": {"only": None}}, "criteria"),
        ({"type": "choice", "criteria": {f"o{i}": None for i in range(256)}}, "criteria"),
        ({"type": "score", "criteria": ["one"]}, "criteria"),
        ({"type": "score", "criteria": [str(i) for i in range(11)]}, "criteria"),
        ({"type": "boolean"}, "q"),
    ],
)
def test_out_of_range_questions_are_typed_errors_naming_the_field(default_judge, question, field):
    with pytest.raises(InvalidRequestError) as exc:
        ask(default_judge, {"ok": BASE["refund"], "q": question})
    assert "questions" in exc.value.field and field in exc.value.field


def test_empty_state_and_unknown_model(default_judge):
    with pytest.raises(InvalidRequestError) as exc:
        ask(default_judge, BASE, state="   ")
    assert exc.value.field == ("state",)
    with pytest.raises(UnknownModelError):
        default_judge.ask({"model": "gpt-4", "state": TICKET, "questions": BASE})


def test_over_budget_state_is_refused_whole_and_never_truncated(default_judge):
    engine = default_judge.engine
    long_state = "word " * (engine.max_state_tokens + 10)
    with pytest.raises(ContextOverflowError) as exc:
        ask(default_judge, BASE, state=long_state)
    assert exc.value.tokens > exc.value.limit == engine.max_state_tokens
    assert "state + longest question" in exc.value.message and str(exc.value.limit) in exc.value.message


def test_a_bad_request_in_a_batch_loses_nothing_else(default_judge):
    good = {"model": "jev-latest", "state": TICKET, "questions": BASE}
    bad = {"model": "jev-latest", "state": "word " * 9000, "questions": BASE}
    out = default_judge.ask_many([good, bad, good])
    assert isinstance(out[1], ContextOverflowError)
    alone = default_judge.ask(good)
    for r in (out[0], out[2]):  # answered in a shared row with the others: equal within 1e-4
        assert r["usage"] == alone["usage"] and r["answers"].keys() == alone["answers"].keys()
        for qid, a in alone["answers"].items():
            got = r["answers"][qid]
            probs = a.get("probabilities") or {"yes": a["noul"]}
            got_probs = got.get("probabilities") or {"yes": got["noul"]}
            assert max(abs(probs[k] - got_probs[k]) for k in probs) <= 1e-4


def test_engine_level_limits_without_the_wire(default_engine):
    q = Question("choice", "x", tuple(Option(str(i)) for i in range(256)))
    (res,) = default_engine.run_batch([EngineRequest("state", (q,))])
    assert isinstance(res, InvalidRequestError) and res.field == ("questions", 0, "criteria")
