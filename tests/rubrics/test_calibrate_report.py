"""``logitjudge calibrate`` on result rows: samples from rows, held-out split, before/after report."""

from __future__ import annotations

import random

from logitjudge.engine.calibration import Calibration
from logitjudge.rubrics.calibrate import fit_and_report, reliability_plot, split
from logitjudge.rubrics.samples import sample_metrics, samples_from_rows

FITTED_FOR = {
    "fingerprint": "f",
    "prompt_version": "p",
    "dtype": "float32",
    "strategy": "packed",
    "model": "m",
}


def _rows(n: int, seed: int = 0):
    """An overconfident yes/no judge: says 0.97 or 0.03, right only 70% of the time; and a
    3-way per-chunk judge that is always 0.9 sure and right half the time."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        truth = rng.random() < 0.5
        right = rng.random() < 0.7
        p = 0.97 if truth == right else 0.03
        label = rng.choice(["supports", "contradicts", "unrelated"])
        pick = label if rng.random() < 0.5 else "unrelated" if label != "unrelated" else "supports"
        probs = {k: (0.9 if k == pick else 0.05) for k in ("supports", "contradicts", "unrelated")}
        rows.append(
            {
                "id": f"synthetic:{i}",
                "results": {
                    "faithfulness": {
                        "name": "faithfulness",
                        "status": "ok",
                        "score": p,
                        "passed": p >= 0.5,
                        "probabilities": {"yes": p, "no": 1 - p},
                    },
                    "chunk_support": {
                        "name": "chunk_support",
                        "status": "ok",
                        "score": 1.0,
                        "details": [{"index": 0, "label": pick, "probabilities": probs}],
                    },
                },
                "gold": {"passed": {"faithfulness": truth}, "chunks": {"chunk_support": [label]}},
            }
        )
    return rows


def test_samples_from_result_rows():
    samples = samples_from_rows(_rows(10))
    assert {(s.source, s.type, len(s.probs)) for s in samples} == {
        ("faithfulness", "noul", 2),
        ("chunk_support", "choice", 3),
    }
    assert len(samples) == 20


def test_split_keeps_items_together_and_is_deterministic():
    samples = samples_from_rows(_rows(200))
    fit_part, held = split(samples, 0.5)
    assert not {s.id for s in fit_part} & {s.id for s in held}
    assert 60 < len({s.id for s in held}) < 140
    assert split(samples, 0.5) == (fit_part, held)


def test_calibration_lowers_held_out_ece_on_overconfident_rows(tmp_path):
    samples = samples_from_rows(_rows(600))
    cal, report = fit_and_report(samples, FITTED_FOR, holdout=0.5)
    for bucket in ("noul:2", "choice:3"):
        before, after = report["by_bucket"][bucket]["before"], report["by_bucket"][bucket]["after"]
        assert after["ece"] < before["ece"] and after["nll"] < before["nll"]
    # the floor tells "as calibrated as n items show" from "still off": a yes/no temperature
    # calibrates the two-valued judge fully (ECE at its floor), while one temperature cannot
    # fix the 3-way judge (always 0.9 sure, right half the time, wrong options 0.05 each)
    yes_no, three_way = report["by_bucket"]["noul:2"], report["by_bucket"]["choice:3"]
    assert 0 < yes_no["ece_floor"] < 0.05 and abs(yes_no["after"]["ece"] - yes_no["ece_floor"]) < 0.02
    assert three_way["after"]["ece"] > 2 * three_way["ece_floor"] > 0
    assert cal.scalings["noul:2"].temperature > 1.5  # overconfident -> softened
    path = tmp_path / "calib.json"
    cal.save(path)
    again = Calibration.load(path)
    assert again.meta["report"]["n_holdout"] == report["n_holdout"]
    png = tmp_path / "rel.png"
    reliability_plot(split(samples, 0.5)[1], cal, png)
    assert png.stat().st_size > 1000
    assert sample_metrics([s for s in samples if s.type == "noul"])["accuracy"] > 0.6


def test_types_limits_the_engine_buckets_fitted_and_leaves_the_others_unscaled():
    samples = samples_from_rows(_rows(600))
    full, _ = fit_and_report(samples, FITTED_FOR, holdout=0.5)
    only_noul, report = fit_and_report(samples, FITTED_FOR, holdout=0.5, types=["noul"])
    assert any(k.startswith("choice") for k in full.scalings)
    assert not any(k.startswith("choice") for k in only_noul.scalings)
    assert only_noul.scalings["noul:2"] == full.scalings["noul:2"]  # same split, same fit
    three_way = report["by_bucket"]["choice:3"]
    assert three_way["scalings"] == [] and three_way["after"] == three_way["before"]  # reported, unscaled
