"""Batch calibration (``--debias batch``): each typed choice/score question's prior, its mean
answer over the rows asking it, is divided out of its answers; nothing else moves.

Measured on the default 1.5B (``benchmarks/quality.py``, sys1bench, the same run's answers):
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
    rows of one choice question, 12 of a score question, 3 of a rare choice question, 3 yes/no,
    and a rubric evaluator (answer_relevancy, score levels) on every row."""
    score = {"type": "score", "instructions": "How urgent is this ticket?", "criteria": ["low", "medium", "high"]}
    rare = {**CHOICE, "instructions": "Which team would a new agent pick?"}
    noul = {"type": "noul", "instructions": "Is money involved?"}
    rows = [
        {"id": f"{kind}-{i}", "input": t, "output": "We will look into it.", "question": q}
        for kind, q, texts in (
            ("c", CHOICE, TICKETS),
            ("s", score, TICKETS),
            ("r", rare, TICKETS[:3]),
            ("n", noul, TICKETS[:3]),
        )
        for i, t in enumerate(texts)
    ]
    names = ["typed_question", "answer_relevancy"]
    return rows, evaluate(default_judge, rows, names), evaluate(default_judge, rows, names, debias="batch")


def _probs(run, prefix):
    return np.array(
        [
            list(r.results["typed_question"].answer["probabilities"].values())
            for r in run.results
            if str(r.id).startswith(prefix)
        ]
    )


def test_evaluate_batch_divides_each_typed_questions_prior_out_on_the_real_model(runs):
    rows, raw, debiased = runs
    assert len(TICKETS) >= MIN_BATCH
    for prefix in ("c-", "s-"):
        np.testing.assert_allclose(_probs(debiased, prefix), batch_calibrate(_probs(raw, prefix)), atol=1e-9)
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
