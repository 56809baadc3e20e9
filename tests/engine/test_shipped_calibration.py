"""Shipped calibrations: applied by default to the engine they were fitted for and to no other,
disclosed in ``describe()`` and ``GET /v1/models``; contrast scores fitted with a temperature
only; every file in ``logitjudge/calibrations`` is usable and earned its place on held-out data."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from logitjudge.engine import calibration as calibration_mod
from logitjudge.engine.calibration import (
    FITTED_FOR_KEYS,
    SHIPPED_DIR,
    Calibration,
    Scaling,
    evaluator_key,
    shipped_for,
)
from logitjudge.judge import Judge
from logitjudge.rubrics.registry import default_registry
from logitjudge.rubrics.samples import samples_from_row
from logitjudge.server.app import create_app

QUESTION = {
    "model": "jev-latest",
    "state": "The invoice was paid twice and the customer asks for one payment back.",
    "questions": {"refund": {"type": "noul", "instructions": "Does the customer want money back?"}},
}


def _fitted_for(describe: dict, **change: str) -> dict:
    return {**{k: describe[k] for k in (*FITTED_FOR_KEYS, "model")}, **change}


def test_shipped_for_needs_every_key_to_match(make_tiny, tmp_path):
    engine = make_tiny("llama")
    described = engine.describe()
    Calibration(_fitted_for(described), {"noul:2": Scaling(2.0)}).save(tmp_path / "b.json")
    Calibration(_fitted_for(described, fingerprint="other"), {"noul:2": Scaling(3.0)}).save(tmp_path / "a.json")
    found = shipped_for(described, tmp_path)
    assert found is not None and found.origin == "shipped:b.json"
    assert found.scalings["noul:2"].temperature == 2.0
    for key, value in (("fingerprint", "x"), ("prompt_version", "lj-prompt-2"), ("dtype", "bfloat16")):
        assert shipped_for({**described, key: value}, tmp_path) is None, key
    # the strategy is recorded, not matched: every strategy gives the same answers (self-check)
    assert shipped_for({**described, "strategy": "packed"}, tmp_path).origin == "shipped:b.json"  # type: ignore[union-attr]
    assert shipped_for(described, tmp_path / "missing") is None


def test_shipped_for_reads_the_package_directory_by_default(make_tiny, tmp_path, monkeypatch):
    described = make_tiny("llama").describe()
    monkeypatch.setattr(calibration_mod, "SHIPPED_DIR", tmp_path / "empty")
    assert shipped_for(described) is None
    Calibration(_fitted_for(described), {"noul:2": Scaling(2.0)}).save(tmp_path / "mine.json")
    monkeypatch.setattr(calibration_mod, "SHIPPED_DIR", tmp_path)
    assert shipped_for(described).origin == "shipped:mine.json"  # type: ignore[union-attr]


def test_judge_load_applies_the_shipped_calibration_by_default_and_says_so(default_judge, tmp_path, monkeypatch):
    """The real default path: ``Judge.load()`` with no calibration argument, on the suite's model."""
    described = default_judge.describe()
    cal = Calibration(_fitted_for(described), {"noul:2": Scaling(0.5, (0.8, 0.0))})
    cal.save(tmp_path / "suite-model.json")
    monkeypatch.setattr(calibration_mod, "SHIPPED_DIR", tmp_path)
    judge = Judge.load(described["source"], self_check=False)
    raw = Judge.load(described["source"], self_check=False, calibration="none")
    assert judge.describe()["calibration_origin"] == "shipped:suite-model.json"
    assert judge.describe()["calibration"] == cal.digest
    assert raw.describe()["calibration"] is None and raw.describe()["calibration_origin"] is None
    p_raw = raw.ask(QUESTION)["answers"]["refund"]["noul"]
    p_cal = judge.ask(QUESTION)["answers"]["refund"]["noul"]
    assert p_cal == pytest.approx(cal.apply("noul", [p_raw, 1 - p_raw])[0], abs=1e-5)
    assert abs(p_cal - p_raw) > 1e-3
    models = TestClient(create_app(judge)).get("/v1/models").json()["models"]
    said = models[-1]["description"]
    assert "calibration shipped:suite-model.json" in said and cal.digest in said
    assert f"prompt {described['prompt_version']}" in said
    raw_said = TestClient(create_app(raw)).get("/v1/models").json()["models"][-1]["description"]
    assert "uncalibrated" in raw_said
    named = Judge.load(described["source"], self_check=False, calibration=str(tmp_path / "suite-model.json"))
    assert named.describe()["calibration_origin"] == str(tmp_path / "suite-model.json")
    assert named.describe()["calibration"] == cal.digest
    # another prompt version is another engine: the file is not applied
    other = Judge.load(described["source"], self_check=False, prompt_version="lj-prompt-2")
    assert other.describe()["calibration"] is None


def _contrast_rows(n: int, seed: int) -> list[dict]:
    """Faithfulness-like result rows whose contrast score is informative but shifted: the gold
    flips at logit(s) = 1.5, not 0, so the 0.5 threshold passes too many items."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        d = float(rng.normal(1.5, 2.0))
        passed = bool(rng.random() < 1 / (1 + np.exp(-(2.0 * (d - 1.5)))))
        s = 1 / (1 + np.exp(-d))
        res = {"status": "ok", "version": "2", "probabilities": {"yes": s, "no": 1 - s}}
        rows.append(
            {
                "id": f"halueval_qa:{i}:x",
                "gold": {"passed": {"faithfulness": passed}},
                "results": {"faithfulness": {**res, "x_p_yes_with_context": 0.5, "x_p_yes_without_context": 0.5}},
            }
        )
    return rows


def test_a_contrast_score_gets_an_evaluator_scaling_that_moves_its_threshold():
    from logitjudge.rubrics.calibrate import fit_and_report
    from logitjudge.rubrics.samples import samples_from_rows

    samples = samples_from_rows(_contrast_rows(600, 0))
    assert all(s.contrast and s.score_level for s in samples)
    fitted_for = {"fingerprint": "f", "prompt_version": "p", "dtype": "float32", "strategy": "auto"}
    cal, report = fit_and_report(samples, fitted_for, holdout=0.5, seed=0)
    assert cal.scalings == {}  # a contrast score is not one engine answer: no engine bucket is fitted on it
    scaling = cal.evaluators["faithfulness@2"]
    assert scaling.bias is not None and scaling.bias[0] < -1.0  # Platt intercept about -2 * 1.5
    assert 1 / scaling.temperature == pytest.approx(2.0, rel=0.35)
    held = report["by_set"]["halueval_qa faithfulness noul:2"]
    assert held["scalings"] == ["evaluator:faithfulness@2"] and held["kept"]
    assert held["after"]["nll"] < held["before"]["nll"] and held["after"]["accuracy"] > held["before"]["accuracy"]
    again = Calibration.from_json(json.loads(json.dumps(cal.to_json())))
    assert again.evaluators == cal.evaluators and again.digest == cal.digest


def test_an_evaluator_scaling_that_does_not_help_is_refused():
    from logitjudge.rubrics.calibrate import fit_and_report
    from logitjudge.rubrics.samples import samples_from_rows

    rows = _contrast_rows(400, 1)
    rng = np.random.default_rng(2)
    for r in rows:  # gold independent of the score, at the score's own base rate
        r["gold"]["passed"]["faithfulness"] = bool(rng.random() < 0.5)
        r["results"]["faithfulness"]["probabilities"] = {"yes": 0.5, "no": 0.5}
    fitted_for = {"fingerprint": "f", "prompt_version": "p", "dtype": "float32", "strategy": "auto"}
    cal, report = fit_and_report(samples_from_rows(rows), fitted_for)
    assert "faithfulness@2" not in cal.evaluators and "evaluator:faithfulness@2" in report["refused"]


def test_a_contrast_result_row_gives_a_contrast_sample():
    row = {
        "id": "halueval_qa:3:right",
        "gold": {"passed": {"faithfulness": True}},
        "results": {
            "faithfulness": {
                "status": "ok",
                "probabilities": {"yes": 0.7, "no": 0.3},
                "x_p_yes_with_context": 0.8,
                "x_p_yes_without_context": 0.6,
            },
            "answer_relevancy": {"status": "ok", "probabilities": {"yes": 0.4, "no": 0.6}},
        },
    }
    row["gold"]["passed"]["answer_relevancy"] = False
    by_source = {s.source: s for s in samples_from_row(row)}
    assert by_source["faithfulness"].contrast and by_source["faithfulness"].probs == (0.7, pytest.approx(0.3))
    assert not by_source["answer_relevancy"].contrast


def test_every_shipped_calibration_is_usable_and_earned_its_place():
    files = sorted(SHIPPED_DIR.glob("*.json"))
    assert files, f"no shipped calibration in {SHIPPED_DIR}"
    for path in files:
        cal = Calibration.load(path)  # strict: format, keys, clamp ranges
        assert all(cal.fitted_for.get(k) for k in FITTED_FOR_KEYS), path.name
        assert cal.scalings, f"{path.name} keeps no scaling: it should not ship"
        report = cal.meta["report"]
        assert report["split"].startswith("by source item") and report["n_holdout"] >= 100
        # every kept scaling lowers the held-out NLL of all the samples it reaches, pooled (a
        # type-wide choice:* may still raise one small bucket's, e.g. choice:6: reported, allowed)
        pooled: dict[tuple[str, ...], list[float]] = {}
        for rec in report["by_bucket"].values():
            if rec.get("kept"):
                acc = pooled.setdefault(tuple(rec["scalings"]), [0.0, 0.0])
                acc[0] += rec["before"]["n"] * rec["before"]["nll"]
                acc[1] += rec["after"]["n"] * rec["after"]["nll"]
        assert pooled, f"{path.name}: no kept scaling reaches a held-out sample"
        for keys, (before, after) in pooled.items():
            assert after < before, (path.name, keys, before, after)
        raw = json.loads(path.read_text())
        assert raw["fitted_for"]["dtype"] in ("float32", "bfloat16", "float16")


def test_every_shipped_evaluator_scaling_names_an_evaluator_of_the_catalogue():
    # A scaling holds for the definition it was fitted on (``name@version``); bumping an
    # evaluator's version without refitting would silently stop applying it. Fail here instead.
    keys = {evaluator_key(d.name, d.version) for d in default_registry().evaluators.values()}
    for path in sorted(SHIPPED_DIR.glob("*.json")):
        stale = set(Calibration.load(path).evaluators) - keys
        assert not stale, f"{path.name}: evaluator scalings for no catalogue definition: {sorted(stale)}; refit"


def test_the_evaluator_scaling_reaches_the_faithfulness_score_on_the_real_model(default_judge):
    """A real contrast run: the score is the scaling of the uncalibrated score, passed follows it."""
    item = {
        "id": "x",
        "input": "When did the bridge open?",
        "output": "The bridge opened in 1932.",
        "context": ["The Sydney Harbour Bridge opened on 19 March 1932."],
    }
    raw = default_judge.evaluate([item], ["faithfulness"]).results[0].results["faithfulness"]
    described = default_judge.describe()
    scaling = Scaling(0.5, (-3.0, 0.0))
    cal = Calibration(_fitted_for(described), {}, evaluators={"faithfulness@2": scaling})
    default_judge.engine.set_calibration(cal)
    try:
        got = default_judge.evaluate([item], ["faithfulness"]).results[0].results["faithfulness"]
    finally:
        default_judge.engine.set_calibration(None)
    assert got.x_score_uncalibrated == pytest.approx(raw.score, abs=1e-6)
    assert got.score == pytest.approx(scaling.apply([raw.score, 1 - raw.score])[0], abs=1e-6)
    assert got.passed == (got.score >= got.threshold)
    assert got.x_p_yes_with_context == pytest.approx(raw.x_p_yes_with_context, abs=1e-6)
    assert raw.x_score_uncalibrated is None


def test_an_engine_bucket_that_hurts_the_contrast_scores_is_refused():
    """A noul:2 temperature fitted on typed yes/no answers also scales every contrast score."""
    from logitjudge.rubrics.calibrate import fit_and_report
    from logitjudge.rubrics.samples import Sample

    rng = np.random.default_rng(3)
    samples = []
    for i in range(300):  # typed answers: mildly overconfident noise, a flattening T helps them a little
        p = 0.75 if rng.random() < 0.5 else 0.25
        samples.append(Sample(f"jevbench:{i}", "typed_question", "noul", (p, 1 - p), int(rng.random() < 0.5)))
    for i in range(300):  # contrast scores: sharp and right, flattening costs them a lot
        gold = int(rng.random() < 0.5)
        p = 0.999 if gold == 0 else 0.001
        samples.append(Sample(f"halueval_qa:{i}:x", "faithfulness", "noul", (p, 1 - p), gold, True, True, "2"))
    fitted_for = {"fingerprint": "f", "prompt_version": "p", "dtype": "float32", "strategy": "auto"}
    typed_only = fit_and_report(samples[:300], fitted_for)[0]
    assert "noul:2" in typed_only.scalings  # on typed answers alone the temperature is kept
    cal, report = fit_and_report(samples, fitted_for)
    assert "noul:2" not in cal.scalings and "noul:2" in report["refused"]


def _good_file() -> dict:
    return {
        "format": 1,
        "fitted_for": {"fingerprint": "f", "prompt_version": "p", "dtype": "float32", "strategy": "auto"},
        "scalings": {"noul:2": {"temperature": 2.0, "bias": [0.5, 0.0], "n": 10, "clamped": False}},
        "evaluators": {"faithfulness@2": {"temperature": 0.5, "bias": [-1.0, 0.0]}},
    }


@pytest.mark.parametrize(
    "change",
    [
        {"format": True},
        {"format": 1.0},
        {"evaluators": [1]},
        {"evaluators": "x"},
        {"meta": [1]},
        {"evaluators": {"faithfulness@2": {"temperature": "0.5"}}},
        {"evaluators": {"faithfulness@2": {"temperature": True}}},
        {"evaluators": {"faithfulness@2": {"temperature": 0.5, "bias": [0.1, 0.5]}}},  # last bias not 0
        {"evaluators": {"faithfulness@2": {"temperature": 0.5, "bias": [0.1, 0.2, 0.0]}}},
        {"scalings": {"noul:2": {"temperature": 2.0, "n": "abc"}}},
        {"scalings": {"noul:2": {"temperature": 2.0, "clamped": "no"}}},
        {"scalings": {"noul:2": 3}},
        {"scalings": {"noul:2": {"temperature": float("nan")}}},
    ],
)
def test_a_malformed_file_is_refused_with_the_one_error(change):
    from logitjudge.errors import CalibrationMismatchError

    Calibration.from_json(_good_file())  # the unchanged file is fine
    with pytest.raises(CalibrationMismatchError):
        Calibration.from_json({**_good_file(), **change})


def test_calibrate_refuses_rows_scored_under_a_calibration(tmp_path, capsys):
    from logitjudge.cli import main

    rows = _contrast_rows(40, 4)
    for r in rows:
        r["results"]["faithfulness"]["x_score_uncalibrated"] = 0.5
    path = tmp_path / "calibrated.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["calibrate", str(path), "--model", "smollm2-135m", "--out", str(tmp_path / "c.json")]) == 2
    assert "x_score_uncalibrated" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()


def test_the_http_evaluate_route_applies_the_evaluator_scaling(default_judge):
    item = {
        "input": "When did the bridge open?",
        "output": "The bridge opened in 1932.",
        "context": ["The Sydney Harbour Bridge opened on 19 March 1932."],
    }
    client = TestClient(create_app(default_judge))
    body = {"evaluators": ["faithfulness"], **item}
    raw = client.post("/api/v1/evaluate", json=body).json()["results"]["faithfulness"]
    scaling = Scaling(0.5, (-3.0, 0.0))
    default_judge.engine.set_calibration(
        Calibration(_fitted_for(default_judge.describe()), {}, evaluators={"faithfulness@2": scaling})
    )
    try:
        one = client.post("/api/v1/evaluate", json=body).json()["results"]["faithfulness"]
        batch = client.post("/api/v1/evaluate", json={"evaluators": ["faithfulness"], "items": [item, item]})
    finally:
        default_judge.engine.set_calibration(None)
    want = scaling.apply([raw["score"], 1 - raw["score"]])[0]
    assert one["x_score_uncalibrated"] == pytest.approx(raw["score"], abs=1e-6)
    assert one["score"] == pytest.approx(want, abs=1e-6) and one["passed"] == (want >= one["threshold"])
    assert batch.status_code == 200, batch.text
    scores = [r["results"]["faithfulness"]["score"] for r in batch.json()["results"]]
    assert scores == [pytest.approx(want, abs=1e-6)] * 2


def test_the_fingerprint_ignores_the_install_path_and_the_transformers_release(make_tiny_model):
    """A shipped calibration is bound to the weights: the same weights read from another
    directory or written by another transformers release keep their fingerprint."""
    from logitjudge.engine.model import weights_fingerprint

    model = make_tiny_model("llama")
    before = weights_fingerprint(model)
    model.config._name_or_path = "/home/someone-else/.cache/logitjudge/models/x"
    model.config.transformers_version = "9.99.0"
    assert weights_fingerprint(model) == before
    model.config.num_hidden_layers += 1  # the model itself changed: another fingerprint
    assert weights_fingerprint(model) != before


def test_the_shipped_calibration_applies_to_the_main_model_as_installed():
    """The main model loaded as a user loads it (the qwen15b extra, fp32 on CPU) gets the
    calibration shipped for it: its fingerprint is the one the file was fitted for."""
    from logitjudge.engine.core import Engine
    from logitjudge.engine.model import load_model
    from logitjudge.settings import MAIN_MODEL

    described = Engine(load_model(MAIN_MODEL, device="cpu", dtype="float32")).describe()
    cal = shipped_for(described)
    assert cal is not None, f"no shipped calibration for fingerprint {described['fingerprint']}"
    assert cal.origin.startswith("shipped:qwen2.5-coder-1.5b-instruct-")
