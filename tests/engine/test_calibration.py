"""Calibration: fitting recovers a known temperature and bias; mismatched files are refused;
every answer field comes from the calibrated distribution (real tiny model, not a stand-in)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from logitjudge.engine.calibration import (
    TEMPERATURE_RANGE,
    Calibration,
    LabelledDistribution,
    Scaling,
    fit,
    fit_scaling,
)
from logitjudge.errors import CalibrationMismatchError
from logitjudge.judge import Judge


def _softmax(z: np.ndarray) -> np.ndarray:
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _synthetic(n: int, k: int, temperature: float, bias: np.ndarray | None = None, seed: int = 0):
    """Labels drawn from softmax(logits); the 'model' reports softmax(T * (logits - bias)), so
    ``softmax(log p / T + bias)`` is the true distribution: the fit should find T and bias."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 1.5, size=(n, k))  # (n, k)
    truth = _softmax(logits)
    gold = np.array([rng.choice(k, p=p) for p in truth])
    shown = logits * temperature
    if bias is not None:
        shown = shown - bias * temperature
    probs = _softmax(shown)
    qtype = "noul" if k == 2 else "choice"
    return [LabelledDistribution(qtype, tuple(p), int(g)) for p, g in zip(probs, gold)]


def test_fit_recovers_a_known_temperature():
    samples = _synthetic(4000, 3, temperature=2.5)
    scaling, record = fit_scaling(samples, allow_bias=False)
    assert scaling.temperature == pytest.approx(2.5, rel=0.08)
    assert record["nll_after"] < record["nll_before"]
    assert scaling.bias is None and not scaling.clamped


def test_fit_recovers_a_known_bias_and_keeps_it_by_aic():
    bias = np.array([1.0, 0.0])  # the model under-reports option 0 by one logit
    samples = _synthetic(4000, 2, temperature=0.5, bias=bias, seed=1)
    scaling, record = fit_scaling(samples)
    assert scaling.temperature == pytest.approx(0.5, rel=0.1)
    assert scaling.bias is not None and scaling.bias[-1] == 0.0
    assert scaling.bias[0] == pytest.approx(1.0, abs=0.2)
    assert record["aic_bias"] < record["aic_temperature"]


def test_no_bias_when_none_is_needed():
    scaling, _ = fit_scaling(_synthetic(4000, 3, temperature=1.0, seed=2))
    assert scaling.bias is None  # AIC does not pay for 2 useless parameters
    assert scaling.temperature == pytest.approx(1.0, rel=0.08)


def test_temperature_is_clamped():
    rng = np.random.default_rng(3)
    # confident and unrelated to the labels: the optimum is "uniform", T -> infinity
    samples = [LabelledDistribution("choice", (0.98, 0.01, 0.01), int(rng.integers(3))) for _ in range(300)]
    scaling, _ = fit_scaling(samples, allow_bias=False)
    assert scaling.temperature == pytest.approx(TEMPERATURE_RANGE[1])
    assert scaling.clamped


def test_fit_buckets_and_type_fallback():
    samples = _synthetic(400, 3, 2.0) + _synthetic(400, 2, 0.5, seed=4)
    cal = fit(samples, {"fingerprint": "f", "prompt_version": "p", "dtype": "float32", "strategy": "packed"})
    assert {"choice:3", "choice:*", "noul:2", "noul:*"} <= set(cal.scalings)
    # a 5-option choice has no bucket: the type-wide temperature applies, without bias
    assert cal.scaling_for("choice", 5) is cal.scalings["choice:*"]
    out = cal.apply("choice", [0.7, 0.1, 0.1, 0.05, 0.05])
    assert sum(out) == pytest.approx(1.0) and out[0] < 0.7  # T > 1 softens


def _cal_for(engine, scalings, **override) -> Calibration:
    fitted = {k: engine.describe()[k] for k in ("fingerprint", "prompt_version", "dtype", "strategy")}
    return Calibration(fitted_for={**fitted, **override}, scalings=scalings)


@pytest.mark.parametrize(
    "key,value",
    [
        ("fingerprint", "another-model"),
        ("prompt_version", "lj-prompt-0"),
        ("dtype", "bfloat16"),
    ],
)
def test_a_file_fitted_for_something_else_is_refused(make_tiny, tmp_path, key, value):
    engine = make_tiny("llama")
    cal = _cal_for(engine, {"noul:2": Scaling(2.0)}, **{key: value})
    path = tmp_path / "calib.json"
    cal.save(path)
    with pytest.raises(CalibrationMismatchError) as err:
        engine.set_calibration(Calibration.load(path))
    assert key in err.value.mismatch and engine.calibration is None
    assert err.value.field == ("calibration",)  # the argument to fix, in every error body


def test_an_unusable_file_is_refused(tmp_path):
    good = {
        "format": 1,
        "fitted_for": {"fingerprint": "f", "prompt_version": "p", "dtype": "d", "strategy": "s"},
        "scalings": {"noul:2": {"temperature": 2.0, "bias": None}},
    }
    for bad in (
        {**good, "format": 2},
        {**good, "extra": 1},
        {**good, "scalings": {"noul:2": {"temperature": 500.0}}},  # outside the clamp range
        {**good, "scalings": {"noul:2": {"temperature": 2.0, "tmeperature": 1}}},
    ):
        path = tmp_path / "c.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(CalibrationMismatchError):
            Calibration.load(path)
    path.write_text(json.dumps(good))
    assert Calibration.load(path).scalings["noul:2"].temperature == 2.0


REQUEST = {
    "model": "jev-latest",
    "state": "Order 1182: the customer paid twice for one blender and asks for the second charge back.",
    "questions": {
        "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
        "team": {
            "type": "choice",
            "instructions": "Which team?",
            "criteria": {"Billing": "payments", "Shipping": None, "Tech": "bugs"},
        },
        "upset": {
            "type": "score",
            "instructions": "How upset?",
            "criteria": ["calm", "annoyed", "cross", "furious"],
        },
    },
}


@pytest.mark.parametrize("rotations", [1, 3])
def test_every_answer_field_comes_from_the_calibrated_distribution(make_tiny, rotations):
    engine = make_tiny("llama")
    judge = Judge(engine, default_rotations=rotations)
    req = judge.validate(REQUEST)
    raw = engine.run_batch([judge.to_engine(req)])[0]
    raw_choice = raw.answers[1].probabilities
    least = int(np.argmin(raw_choice))
    # T = 20 flattens, a +5 bias on the least likely option makes it the argmax: a choice
    # computed before calibration would differ from the one computed after.
    choice_bias = tuple(5.0 if i == least else 0.0 for i in range(3))
    cal = _cal_for(
        engine,
        {
            "noul:2": Scaling(0.5, (0.7, 0.0)),
            "choice:3": Scaling(20.0, choice_bias),
            "score:4": Scaling(3.0, (0.0, 0.0, 2.0, 0.0)),
        },
    )
    engine.set_calibration(cal)
    assert engine.describe()["calibration"] == cal.digest
    got = engine.run_batch([judge.to_engine(req)])[0]
    for q, (a, b) in zip(("noul", "choice", "score"), zip(raw.answers, got.answers)):
        expected = cal.apply(q, a.probabilities)
        assert b.probabilities == pytest.approx(expected, abs=1e-6)
        assert b.option_mass == pytest.approx(a.option_mass)  # mass is the raw label mass
    resp = judge.ask(REQUEST)["answers"]
    noul_p, choice_p, score_p = (got.answers[i].probabilities for i in range(3))
    assert resp["refund"]["noul"] == pytest.approx(noul_p[0])
    names = list(REQUEST["questions"]["team"]["criteria"])
    assert resp["team"]["choice"] == names[int(np.argmax(choice_p))] == names[least]
    assert list(resp["team"]["probabilities"].values()) == pytest.approx(list(choice_p))
    assert resp["upset"]["score"] == pytest.approx(sum(i * p for i, p in enumerate(score_p)))
    assert resp["upset"]["score"] != pytest.approx(sum(i * p for i, p in enumerate(raw.answers[2].probabilities)))
    engine.set_calibration(None)
    again = engine.run_batch([judge.to_engine(req)])[0]
    assert again.answers[1].probabilities == pytest.approx(raw_choice, abs=1e-6)
