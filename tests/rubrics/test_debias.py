"""Batch calibration (``--debias batch``): each typed choice/score question's prior, its mean
answer over the rows asking it, is divided out of its answers; nothing else moves.

Measured on the default 1.5B (``benchmarks/quality/quality.py``, sys1bench, the same run's answers):
choice accuracy 0.55 -> 0.85 and score accuracy 0.15 -> 0.42 on 33 items each. Here: the
arithmetic, then the real suite model through ``evaluate``, then the command's file handling.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from logitjudge.rubrics.api import evaluate
from logitjudge.rubrics.debias import MIN_BATCH, batch_calibrate

CHOICE = {
    "type": "choice",
    "instructions": "Which team should handle this ticket?",
    "criteria": {"billing": "charges and refunds", "shipping": "parcels and delivery", "login": "passwords"},
}
SHUFFLED = {**CHOICE, "criteria": dict(reversed(CHOICE["criteria"].items()))}  # the same question
NAMES = sorted(CHOICE["criteria"])
TICKETS = [
    "I was charged twice for one order.",
    "My parcel has not arrived after two weeks.",
    "I cannot log in since I changed my password.",
    "The refund for my cancelled order never came.",
    "The courier left the package at the wrong house.",
    "Two-factor codes never reach my phone.",
    "My card was billed after I cancelled.",
    "Tracking has said 'in transit' for ten days.",
    "The password reset email never arrives.",
    "I want my money back for a duplicate charge.",
    "The box arrived crushed and wet.",
    "My account is locked after three tries.",
]


def test_batch_calibrate_divides_the_mean_answer_out():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 3, 300)
    evidence = np.where(np.eye(3)[truth] > 0, 0.6, 0.2)  # the right option is three times as likely
    prior = np.array([0.05, 0.15, 0.80])  # ...and the judge leans hard on the last one
    p = evidence * prior
    p /= p.sum(axis=1, keepdims=True)
    q = batch_calibrate(p)
    assert np.allclose(q.sum(axis=1), 1.0)
    assert (p.argmax(1) == truth).mean() < 0.5 < 0.9 < (q.argmax(1) == truth).mean()
    np.testing.assert_allclose(q, (p / p.mean(0)) / (p / p.mean(0)).sum(1, keepdims=True))
    # one answer repeated: nothing tells its options apart any more, so all become equal
    np.testing.assert_allclose(batch_calibrate(np.tile([0.7, 0.2, 0.1], (5, 1))), 1 / 3)
    # an option no answer gave any mass keeps 0 (no division by zero)
    assert batch_calibrate(np.array([[0.5, 0.5, 0.0], [0.9, 0.1, 0.0]]))[:, 2].tolist() == [0.0, 0.0]


@pytest.fixture(scope="module")
def runs(default_judge):
    """The same rows evaluated as answered and batch-calibrated on the suite's real model: 12
    rows of one choice question (its options in reverse order in every other row), 12 of a score
    question, 3 of a rare choice question, 12 yes/no, and a rubric evaluator (answer_relevancy,
    score levels) on every row."""
    score = {"type": "score", "instructions": "How urgent is this ticket?", "criteria": ["low", "medium", "high"]}
    rare = {**CHOICE, "instructions": "Which team would a new agent pick?"}
    noul = {"type": "noul", "instructions": "Is money involved?"}
    rows = [
        {"id": f"{kind}-{i}", "input": t, "output": "We will look into it.", "question": q}
        for kind, qs, texts in (
            ("c", (CHOICE, SHUFFLED), TICKETS),
            ("s", (score,), TICKETS),
            ("r", (rare,), TICKETS[:3]),
            ("n", (noul,), TICKETS),
        )
        for i, (t, q) in enumerate(zip(texts, qs * len(texts)))
    ]
    names = ["typed_question", "answer_relevancy"]
    return rows, evaluate(default_judge, rows, names), evaluate(default_judge, rows, names, debias="batch")


def _probs(run, prefix):
    """(rows, options) of the typed answers of rows ``prefix*``, options in name order."""
    answers = [r.results["typed_question"].answer["probabilities"] for r in run.results if str(r.id).startswith(prefix)]
    return np.array([[a[k] for k in sorted(a)] for a in answers])


def test_evaluate_batch_divides_each_typed_questions_prior_out_on_the_real_model(runs):
    rows, raw, debiased = runs
    assert len(TICKETS) >= MIN_BATCH
    for prefix in ("c-", "s-"):
        # the second run hits the state cache that the first run's one-question forwards filled:
        # its raw answers are the first run's within float32 rounding (logitjudge.engine.state_cache)
        np.testing.assert_allclose(_probs(debiased, prefix), batch_calibrate(_probs(raw, prefix)), atol=1e-5)
        assert not np.allclose(_probs(debiased, prefix), _probs(raw, prefix), atol=1e-3)
    # every field is derived from the adjusted distribution: the choice is its argmax, the
    # score its expected level
    for r in debiased.results:
        res = r.results["typed_question"]
        if res.answer["type"] == "noul":
            continue
        probs = res.answer["probabilities"]
        if res.answer["type"] == "choice":
            assert res.answer["choice"] == max(probs, key=probs.get) == res.label
        if res.answer["type"] == "score":
            assert res.answer["score"] == pytest.approx(sum(int(k) * v for k, v in probs.items()))


def test_rare_questions_yes_no_and_rubric_evaluators_are_left_as_answered(runs):
    rows, raw, debiased = runs
    np.testing.assert_array_equal(_probs(debiased, "r-"), _probs(raw, "r-"))  # 3 < MIN_BATCH rows
    assert sum(str(r.id).startswith("n-") for r in raw.results) >= MIN_BATCH  # left by type, not count
    for before, after in zip(raw.results, debiased.results, strict=True):
        assert after.results["answer_relevancy"] == before.results["answer_relevancy"]
        if str(before.id).startswith("n-"):
            assert after.results["typed_question"] == before.results["typed_question"]
    assert raw.summary["answer_relevancy"] == debiased.summary["answer_relevancy"]


def test_an_unknown_debias_mode_is_a_request_error(default_judge):
    from logitjudge.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="debias: one of none, batch") as err:
        evaluate(default_judge, [{"input": "x", "question": CHOICE}], "typed_question", debias="rotate")
    assert err.value.field == ("debias",)


def test_the_command_records_batch_calibration_and_never_resumes_it(tmp_path, capsys):
    from logitjudge.cli.evaluate import main

    data, out = tmp_path / "d.jsonl", tmp_path / "o.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"t{i}", "input": t, "question": CHOICE}) + "\n" for i, t in enumerate(TICKETS))
    )
    argv = [str(data), "--out", str(out), "--no-progress", "--judge-factory", "lj_factories:make_judge"]
    assert main([*argv, "--debias", "batch"]) == 0
    err = capsys.readouterr().err
    assert "the prior of 1 choice/score questions divided out of their 12 answers" in err
    summary = json.loads(Path(f"{out}.summary.json").read_text())
    assert summary["run"]["debias"] == {"mode": "batch", "questions": 1, "answers": 12, "left": 0}
    assert json.loads(Path(f"{out}.run.json").read_text())["selection"]["debias"] == "batch"
    # the scripted judge always prefers the first option; divided out, every option is equal
    first = json.loads(out.read_text().splitlines()[0])["results"]["typed_question"]["answer"]
    assert first["probabilities"] == pytest.approx({"billing": 1 / 3, "shipping": 1 / 3, "login": 1 / 3})
    before = out.read_bytes()
    assert main([*argv, "--debias", "batch"]) == 2  # a file with rows: a prior over a part would differ
    assert "cannot be resumed" in capsys.readouterr().err
    assert main(argv) == 2  # resuming it without --debias is another configuration
    assert "--debias: none now, batch in the file" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert main([*argv, "--debias", "batch", "--overwrite"]) == 0


def test_items_that_fail_or_ask_no_question_and_contrast_twins_pass_through():
    """The runner's wiring with a scripted engine (fixed probabilities; no model needed for
    this bookkeeping): an item whose context holds a blank chunk (an early error), one that
    asks nothing, and faithfulness with its content-free twin sit among 12 typed rows."""
    from lj_factories import make_judge

    from logitjudge.rubrics.runner import plan_item, run_plans

    judge = make_judge()
    items = [{"id": f"t{i}", "input": t, "question": CHOICE if i % 2 else SHUFFLED} for i, t in enumerate(TICKETS)]
    items += [
        {"id": "blank", "output": "o", "context": [" "], "question": CHOICE},
        {"id": "nothing", "input": "no fields the evaluator needs"},
        {"id": "faith", "output": "Refunds take 3 days.", "context": ["Refunds take 3 days."], "question": CHOICE},
    ]
    names = ["typed_question", "faithfulness"]
    raw, debiased = evaluate(judge, items, names), evaluate(judge, items, names, debias="batch")
    for before, after in zip(raw.results, debiased.results, strict=True):
        assert before.id == after.id
        for name in ("faithfulness",):
            assert after.results.get(name) == before.results.get(name)
    asked = [r for r in raw.results if r.results["typed_question"].status == "ok"]
    assert [r.id for r in asked] == [*(f"t{i}" for i in range(12)), "faith"]
    by_name = {r.id: [r.results["typed_question"].answer["probabilities"][k] for k in NAMES] for r in asked}
    expected = dict(zip(by_name, batch_calibrate(np.array(list(by_name.values()))), strict=True))
    for r in debiased.results:
        if r.id in expected:  # options matched by name across the two option orders
            got = r.results["typed_question"].answer["probabilities"]
            np.testing.assert_allclose([got[k] for k in NAMES], expected[r.id], atol=1e-12)
    assert debiased.results[12].results["typed_question"] == raw.results[12].results["typed_question"]  # blank
    # 13 rows ask the choice question (12 + "faith"; "blank" failed before any engine call)
    report: dict = {}
    from logitjudge.rubrics.api import to_item
    from logitjudge.rubrics.registry import default_registry

    selection = default_registry().select(names)
    plans = [plan_item(to_item(item), selection, strict=False) for item in items]
    list(run_plans(judge, plans, debias="batch", debias_report=report))
    assert report == {"questions": 1, "answers": 13, "left": 0}
