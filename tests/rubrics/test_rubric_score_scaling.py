"""Evaluator scalings of rubric scores (context_recall's E[level]/3) and ``calibrate --base``.

A rubric score ranks items but can sit in a narrow band (the default model's context_recall:
0.53-0.75 for every item run of the recall set), so the hosted 0.75 threshold passes none of them.
Its evaluator scaling (Platt over the score's logit) is fitted on score-level samples that take
part in no engine bucket, and ``--base`` adds it on top of a calibration's buckets unchanged.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from logitjudge.engine.calibration import EVALUATOR_BIAS_RANGE, Calibration, Scaling
from logitjudge.rubrics.calibrate import fit_and_report
from logitjudge.rubrics.registry import default_registry
from logitjudge.rubrics.samples import samples_from_row, samples_from_rows
from logitjudge.rubrics.scoring import score_answers

FITTED_FOR = {"fingerprint": "f", "prompt_version": "p", "dtype": "float32", "strategy": "auto"}
BASE = Calibration(
    FITTED_FOR,
    {"noul:2": Scaling(0.3, None, 55), "choice:*": Scaling(0.8, None, 77)},
    {"data": ["base.json"], "report": {"n_holdout": 193}},
    {"faithfulness@2": Scaling(0.9, (-1.45, 0.0), 48)},
)


def _levels(expected: float) -> dict[str, float]:
    """A 4-level distribution with the given expected level (mass on the two levels around it)."""
    lo = int(np.floor(expected))
    hi = min(3, lo + 1)
    w = expected - lo
    probs = {str(k): 0.0 for k in range(4)}
    probs[str(lo)] += 1 - w
    probs[str(hi)] += w
    return probs


def _recall_rows(n: int, seed: int) -> list[dict]:
    """Rows like the recall set's: E[level] in [1.6, 2.2]; gold passes when it is above 1.95 (noisy)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        expected = float(rng.uniform(1.6, 2.2))
        passed = bool(expected + rng.normal(0, 0.05) > 1.95)
        rows.append(
            {
                "id": f"halueval_qa_recall:{i}:own_knowledge",
                "gold": {"passed": {"context_recall": passed}},
                "results": {
                    "context_recall": {
                        "status": "ok",
                        "version": "1",
                        "score": expected / 3,
                        "probabilities": _levels(expected),
                        "legend": {str(k): f"level {k}" for k in range(4)},
                        "threshold": 0.75,
                    }
                },
            }
        )
    return rows


def test_a_rubric_result_gives_a_score_level_sample_with_its_levels():
    row = _recall_rows(1, 0)[0]
    (s,) = samples_from_row(row)
    res = row["results"]["context_recall"]
    assert s.source == "context_recall" and s.version == "1" and s.score_level and not s.contrast
    assert s.levels == tuple(res["probabilities"][k] for k in "0123")
    assert s.probs[0] == pytest.approx(res["score"]) and s.gold == (0 if row["gold"]["passed"]["context_recall"] else 1)
    del row["gold"]["passed"]["context_recall"]  # no pass/fail label: no sample
    assert samples_from_row(row) == []


def test_a_rubric_score_gets_an_evaluator_scaling_and_no_engine_bucket():
    samples = samples_from_rows(_recall_rows(300, 1))
    cal, report = fit_and_report(samples, FITTED_FOR, holdout=0.5, seed=0)
    assert cal.scalings == {}  # a rubric score is not one engine answer: no bucket is fitted on it
    scaling = cal.evaluators["context_recall@1"]
    # the crossing sits at the gold cut, E = 1.95 (score 0.65), which a +-5 bias could not reach here
    assert scaling.bias is not None and scaling.bias[0] < -5.0
    assert EVALUATOR_BIAS_RANGE[0] <= scaling.bias[0]
    crossing = 1 / (1 + np.exp(scaling.bias[0] * scaling.temperature))  # sigmoid(logit s / T + b) = 0.5
    assert crossing == pytest.approx(1.95 / 3, abs=0.02)
    held = report["by_set"]["halueval_qa_recall context_recall noul:2"]
    assert held["kept"] and held["after"]["accuracy"] > 0.85 > 0.6 > held["before"]["accuracy"]
    assert held["after"]["nll"] < held["before"]["nll"]
    again = Calibration.from_json(json.loads(json.dumps(cal.to_json())))  # the wider bias range loads
    assert again.evaluators == cal.evaluators


def test_a_score_bucket_reaches_the_rubric_score_through_its_levels():
    from logitjudge.rubrics.calibrate import _calibrated

    (s,) = samples_from_row(_recall_rows(1, 2)[0])
    sharpen = Calibration(FITTED_FOR, {"score:4": Scaling(0.5)})
    (got,) = _calibrated(sharpen, [s])
    levels = Scaling(0.5).apply(s.levels)
    assert got.probs[0] == pytest.approx(sum(i * p for i, p in enumerate(levels)) / 3)
    (same,) = _calibrated(Calibration(FITTED_FOR, {"noul:2": Scaling(0.2)}), [s])  # a noul bucket: untouched
    assert same.probs == pytest.approx(s.probs)


def test_base_keeps_its_buckets_and_adds_the_evaluator_scaling():
    samples = samples_from_rows(_recall_rows(300, 3))
    cal, report = fit_and_report(samples, FITTED_FOR, holdout=0.5, seed=0, meta={"data": ["recall.json"]}, base=BASE)
    assert cal.scalings == BASE.scalings
    assert cal.evaluators["faithfulness@2"] == BASE.evaluators["faithfulness@2"]
    assert "context_recall@1" in cal.evaluators
    assert cal.meta["report"] == BASE.meta["report"] and cal.meta["data"] == ["base.json"]
    (refit,) = cal.meta["evaluator_refits"]
    assert refit["base"] == BASE.digest and refit["data"] == ["recall.json"] and refit["report"] is report


def test_score_rubric_applies_the_scaling_to_the_score_and_keeps_the_level_label():
    from logitjudge.engine.types import Answer, Option, Question
    from logitjudge.rubrics.scoring import Answered

    defn = default_registry().evaluators["context_recall"]
    levels = (0.02, 0.27, 0.41, 0.30)  # E = 1.99
    question = Question(type="score", instructions="?", options=tuple(Option(str(k), f"l{k}") for k in range(4)))
    answered = [Answered(question, Answer(type="score", probabilities=levels, option_mass=1.0))]
    raw = score_answers(defn, answered)
    assert raw.score == pytest.approx(1.99 / 3) and not raw.passed and raw.x_score_uncalibrated is None
    scaling = Scaling(0.05, (-13.46, 0.0))
    got = score_answers(defn, answered, scaling=scaling)
    assert got.score == pytest.approx(scaling.apply([raw.score, 1 - raw.score])[0])
    assert got.x_score_uncalibrated == pytest.approx(raw.score) and got.passed == (got.score >= 0.75)
    assert got.label == raw.label == "1.9 / 3" and got.probabilities == raw.probabilities
    with pytest.raises(ValueError, match="probability and rubric"):
        score_answers(default_registry().evaluators["chunk_relevance"], answered, scaling=scaling)


def _quality_json(path, rows, engine) -> None:
    path.write_text(json.dumps({"environment": {"engine": engine}, "items": {"halueval_qa_recall_derived": rows}}))


def test_calibrate_base_writes_the_base_buckets_plus_the_new_scaling(tmp_path, capsys):
    from logitjudge.cli import main

    engine = {**FITTED_FOR, "model": "toy", "calibration": None}
    base = tmp_path / "base.json"
    BASE.save(base)
    data = tmp_path / "recall-raw.json"
    _quality_json(data, _recall_rows(300, 4), engine)
    out = tmp_path / "out.json"
    assert main(["calibrate", str(data), "--base", str(base), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert BASE.digest in said and "evaluator:context_recall@1" in said
    written = Calibration.load(out)
    assert written.scalings == BASE.scalings and set(written.evaluators) == {"faithfulness@2", "context_recall@1"}
    # a base fitted for another engine is refused, naming the key
    other = tmp_path / "other.json"
    Calibration({**FITTED_FOR, "dtype": "bfloat16"}, BASE.scalings).save(other)
    assert main(["calibrate", str(data), "--base", str(other), "--out", str(tmp_path / "x.json")]) == 2
    assert "dtype" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
    # nothing to add on top of the base (a score of 0.5 and gold at random, half passing): no file
    flat = tmp_path / "flat.json"
    rows = _recall_rows(300, 5)
    rng = np.random.default_rng(6)
    for r in rows:
        r["results"]["context_recall"]["probabilities"] = _levels(1.5)
        r["gold"]["passed"]["context_recall"] = bool(rng.random() < 0.5)
    _quality_json(flat, rows, engine)
    assert main(["calibrate", str(flat), "--base", str(base), "--out", str(tmp_path / "y.json")]) == 1
    assert not (tmp_path / "y.json").exists()


def test_calibrate_base_again_on_its_own_output_writes_and_appends_the_refit(tmp_path):
    """Regression: a refit equal to the base's scaling was taken for "nothing kept" (exit 1)."""
    from logitjudge.cli import main

    engine = {**FITTED_FOR, "model": "toy", "calibration": None}
    base = tmp_path / "base.json"
    BASE.save(base)
    data = tmp_path / "recall-raw.json"
    _quality_json(data, _recall_rows(300, 7), engine)
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert main(["calibrate", str(data), "--base", str(base), "--out", str(first)]) == 0
    assert main(["calibrate", str(data), "--base", str(first), "--out", str(second)]) == 0
    again = Calibration.load(second)
    assert again.evaluators == Calibration.load(first).evaluators  # the same data refits the same scaling
    assert [r["base"] for r in again.meta["evaluator_refits"]] == [BASE.digest, Calibration.load(first).digest]


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--out", "{data}"], "one of the labelled inputs"),
        (["--out", "{tmp}"], "is a directory"),
        (["--out", "{tmp}/missing/x.json"], "does not exist"),
        (["--out", "{tmp}/x.json", "--report", "{tmp}/r.txt"], "PNG"),
        (["--out", "{tmp}/x.json", "--base", "{tmp}/latin1.json"], "cannot read the calibration file"),
        (["--out", "{tmp}/x.json", "--base", "{base}", "--types", "noul"], "--types and --base"),
    ],
)
def test_calibrate_refuses_bad_flags_before_any_work(tmp_path, capsys, flags, said):
    from logitjudge.cli import main

    data = tmp_path / "recall-raw.json"
    _quality_json(data, _recall_rows(40, 8), {**FITTED_FOR, "model": "toy", "calibration": None})
    BASE.save(tmp_path / "base.json")
    (tmp_path / "latin1.json").write_bytes('{"format": 1, "x": "caf\u00e9"}'.encode("latin-1"))
    subst = {"data": str(data), "tmp": str(tmp_path), "base": str(tmp_path / "base.json")}
    before = data.read_bytes()
    assert main(["calibrate", str(data), *[f.format(**subst) for f in flags]]) == 2
    assert said in capsys.readouterr().err
    assert data.read_bytes() == before


@pytest.mark.parametrize("share", ["0", "1", "nan", "-0.5", "x"])
def test_calibrate_holdout_must_lie_strictly_between_0_and_1(tmp_path, share):
    from logitjudge.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "x.json", "--out", str(tmp_path / "c.json"), "--holdout", share])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    "probabilities",
    [
        {"0": 0.2, "1": 0.4, "2": 0.8, "3": 0.6},  # sums to 2
        {"0": 0.5, "1": float("nan"), "2": 0.5, "3": 0.0},
        {"0": 0.5, "2": 0.5},  # a level missing
        {"0": 0.5, "\u00b2": 0.5},  # a digit that is not 0-9
        {"0": 0.5, "1": None},
    ],
)
def test_a_rubric_result_with_malformed_levels_gives_no_sample(probabilities):
    row = _recall_rows(1, 9)[0]
    row["results"]["context_recall"]["probabilities"] = probabilities
    assert samples_from_row(row) == []
