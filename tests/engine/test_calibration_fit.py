"""A calibration fit must earn its place (issue 15, part 1): refused where it does not lower the
cross-validated or held-out NLL, split by source item, and checked on imbalanced slices.

Regression: the fitted yes/no temperature (~19) flattened every P(yes) of the default model to
~0.5, which scored as "well calibrated" on a 50/50 sample and is useless on real traffic; the
split was by item id, so the right and hallucinated answers of one question fell on both sides.
No model is loaded here (fit logic and the ``calibrate`` command on recorded result rows).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from logitjudge.cli.calibrate import add_calibrate_parser, run_calibrate
from logitjudge.engine.calibration import (
    Calibration,
    LabelledDistribution,
    Scaling,
    cross_validated_nll,
    fit,
)
from logitjudge.rubrics.calibrate import fit_and_report, imbalanced_slice, refuse_worse, split
from logitjudge.rubrics.samples import Sample

FITTED_FOR = {"fingerprint": "f", "prompt_version": "p", "dtype": "float32", "strategy": "packed", "model": "m"}


def _constant_but_calibrated(n: int = 100) -> list[LabelledDistribution]:
    """P(yes) = 0.8 for every item and exactly 80% of them are yes: already calibrated. Any
    temperature fitted on some folds moves 0.8 towards those folds' rate and loses on the rest
    (the NLL is strictly convex in the predicted rate), so no fit can lower out-of-fold NLL."""
    return [LabelledDistribution("noul", (0.8, 0.2), 0 if i % 5 else 1, f"item:{i}") for i in range(n)]


def _overconfident(n: int, seed: int = 0, k: int = 2) -> list[LabelledDistribution]:
    """The model says softmax(2.5 * logits) where labels follow softmax(logits): T = 2.5 helps."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 1.5, size=(n, k))  # (n, k)
    truth = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    shown = np.exp(2.5 * logits) / np.exp(2.5 * logits).sum(1, keepdims=True)
    gold = [int(rng.choice(k, p=p)) for p in truth]
    qtype = "noul" if k == 2 else "choice"
    return [
        LabelledDistribution(qtype, tuple(map(float, p)), g, f"item:{i}") for i, (p, g) in enumerate(zip(shown, gold))
    ]


def test_a_fit_that_cannot_help_is_refused():
    cal = fit(_constant_but_calibrated(), FITTED_FOR)
    assert cal.scalings == {}  # the identity
    record = cal.meta["fits"]["noul:2"]
    assert "cross-validated NLL" in record["refused"]
    assert record["cv_nll_after"] > record["cv_nll_before"]
    assert "noul:*" in cal.meta["fits"] and cal.meta["fits"]["noul:*"]["refused"]


def test_a_fit_that_helps_is_accepted():
    cal = fit(_overconfident(600) + _overconfident(600, seed=1, k=3), FITTED_FOR)
    assert {"noul:2", "choice:3"} <= set(cal.scalings)
    for bucket in ("noul:2", "choice:3"):
        record = cal.meta["fits"][bucket]
        assert "refused" not in record and record["cv_nll_after"] < record["cv_nll_before"] - 0.01
        assert cal.scalings[bucket].temperature == pytest.approx(2.5, rel=0.2)


def test_cross_validation_keeps_a_source_item_in_one_fold():
    # every item three times in one group: with groups, each fold holds out whole items
    base = _overconfident(60, seed=3)
    tripled = [s for s in base for _ in range(3)]
    grouped = cross_validated_nll(tripled)
    ungrouped = cross_validated_nll([LabelledDistribution(s.type, s.probs, s.gold) for s in tripled])
    assert grouped is not None and ungrouped is not None
    assert grouped[0] == pytest.approx(ungrouped[0])  # same samples, same identity NLL
    assert grouped[1] > ungrouped[1]  # leaking copies into the training folds looks better
    assert cross_validated_nll([LabelledDistribution("noul", (0.6, 0.4), 0, "one")] * 10) is None


def _sample(i: int, p: float, gold: int, variant: str = "") -> Sample:
    return Sample(f"toy:{i}{variant}", "faithfulness", "noul", (p, 1 - p), gold)


def test_held_out_refusal_drops_a_scaling_that_makes_held_out_nll_worse():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.02, 0.98, 400)
    calibrated = [_sample(i, float(q), int(rng.random() >= q)) for i, q in enumerate(p)]
    flatten = Calibration(FITTED_FOR, {"noul:2": Scaling(5.0), "noul:*": Scaling(5.0)})
    kept, refused = refuse_worse(flatten, calibrated)
    assert kept.scalings == {} and set(refused) == {"noul:2", "noul:*"}  # the type-wide one is tried next
    assert "held-out NLL" in refused["noul:2"]
    sharp = [
        _sample(i, 0.99 if g == 0 else 0.01, g if rng.random() < 0.7 else 1 - g)
        for i, g in enumerate(rng.integers(0, 2, 400))
    ]
    kept, refused = refuse_worse(Calibration(FITTED_FOR, {"noul:2": Scaling(5.0)}), sharp)
    assert set(kept.scalings) == {"noul:2"} and refused == {}


def test_split_is_by_source_item():
    samples = [_sample(i, 0.7, 0, ":right") for i in range(100)] + [
        _sample(i, 0.7, 1, ":hallucinated") for i in range(100)
    ]
    fit_part, held = split(samples, 0.5, seed=0)
    items = lambda part: {s.id.rsplit(":", 1)[0] for s in part}  # noqa: E731
    assert not items(fit_part) & items(held) and len(items(held)) == 50
    assert split(samples, 0.5, seed=0) == (fit_part, held) and split(samples, 0.5, seed=1) != (fit_part, held)


def test_imbalanced_slice_has_the_asked_share():
    samples = [_sample(i, 0.6, i % 2) for i in range(200)]
    s80 = imbalanced_slice(samples, 0.8)
    assert len(s80) == 125 and sum(s.gold == 0 for s in s80) == 100
    s20 = imbalanced_slice(samples, 0.2)
    assert len(s20) == 125 and sum(s.gold == 0 for s in s20) == 25


def _no_signal(n: int, seed: int = 0) -> list[Sample]:
    """The default model's failure: P(yes) about 0.8 whatever the label, labels 50/50."""
    rng = np.random.default_rng(seed)
    return [_sample(i, float(rng.uniform(0.75, 0.85)), i % 2) for i in range(n)]


def test_a_flattening_fit_is_flagged_and_fails_on_an_imbalanced_slice():
    cal, report = fit_and_report(_no_signal(400), FITTED_FOR, holdout=0.5)
    assert cal.scalings["noul:2"].temperature > 10  # it does lower NLL on the 50/50 sample...
    assert "flattens" in report["flattening"]["noul:2"]
    bal = report["by_bucket"]["noul:2"]
    assert bal["after"]["nll"] < bal["before"]["nll"] and bal["after"]["auroc"] == pytest.approx(bal["before"]["auroc"])
    slant = report["imbalanced"]["noul:2 80/20"]  # ...and raises it where 80% are yes
    assert slant["before"]["n"] >= 50 and slant["after"]["nll"] > slant["before"]["nll"]
    assert slant["after"]["ece"] > slant["before"]["ece"]


def _quality_json(path, samples: list[Sample]) -> None:
    items = [
        {
            "id": s.id,
            "results": {
                "faithfulness": {
                    "name": "faithfulness",
                    "status": "ok",
                    "score": s.probs[0],
                    "passed": s.probs[0] >= 0.5,
                    "probabilities": {"yes": s.probs[0], "no": s.probs[1]},
                }
            },
            "gold": {"passed": {"faithfulness": s.gold == 0}},
        }
        for s in samples
    ]
    engine = {**FITTED_FOR, "calibration": None}
    path.write_text(json.dumps({"environment": {"engine": engine}, "items": {"toy": items}}))


def _args(tmp_path, name: str) -> argparse.Namespace:
    """The command's own parser, so every flag it has gets its default."""
    parser = argparse.ArgumentParser()
    add_calibrate_parser(parser.add_subparsers())
    return parser.parse_args(["calibrate", str(tmp_path / "q.json"), "--out", str(tmp_path / name)])


def test_the_cli_refuses_to_write_a_file_that_does_not_help(tmp_path, capsys):
    rng = np.random.default_rng(1)
    _quality_json(tmp_path / "q.json", [_sample(i, 0.8, int(rng.random() >= 0.8)) for i in range(300)])
    assert run_calibrate(_args(tmp_path, "calib.json")) == 1
    err = capsys.readouterr().err
    assert "no scaling kept" in err and "not written" in err
    assert not (tmp_path / "calib.json").exists()


def test_the_cli_writes_a_file_that_helps(tmp_path, capsys):
    over = _overconfident(400)
    _quality_json(tmp_path / "q.json", [Sample(s.group, "faithfulness", "noul", s.probs, s.gold) for s in over])
    assert run_calibrate(_args(tmp_path, "calib.json")) == 0
    cal = Calibration.load(tmp_path / "calib.json")
    assert cal.scalings["noul:2"].temperature > 1.5
    assert "imbalanced" in cal.meta["report"] and "AUROC" in capsys.readouterr().out
