"""benchmarks/quality/grounding.py's claim level: which claims count, what each reader's P(grounded) is.

Hand-made cells (the shape ``cells_of`` writes) and faithfulness scores; no model.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _grounding():
    for sub in ("benchmarks", "benchmarks/quality"):  # the script's own imports: _results, rag_quality
        if str(ROOT / sub) not in sys.path:
            sys.path.insert(0, str(ROOT / sub))
    spec = importlib.util.spec_from_file_location("grounding_bench", ROOT / "benchmarks" / "quality" / "grounding.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("grounding_bench", module)
    spec.loader.exec_module(module)
    return module


def _cell(row: str, unit: str, *, complete: bool, partial: bool, p: float) -> dict:
    gold = "supports" if complete or partial else "unrelated"
    return {
        "row": row,
        "unit": unit,
        "complete": complete,
        "partial": partial,
        "gold": gold,
        "overlap": 0.5,
        "base": {"supports": p},
    }


def test_claims_take_the_best_passage_and_leave_out_partly_supported_ones():
    g = _grounding()
    cells = [
        _cell("a", "r1", complete=True, partial=False, p=0.7),
        _cell("a", "r1", complete=False, partial=False, p=0.2),
        _cell("b", "r1", complete=False, partial=True, p=0.9),  # best passage only partly supports: left out
        _cell("b", "r1", complete=False, partial=False, p=0.1),
        _cell("c", "r2", complete=False, partial=False, p=0.4),
        _cell("c", "r2", complete=False, partial=False, p=0.3),
    ]
    claims = g.claims_of(cells, {"a": {"adapter": 0.8, "base": 0.6}, "c": {"base": 0.55}})
    by_unit = sorted((c["unit"], c["y"], c["base"]) for c in claims)
    assert by_unit == [("r1", True, 0.7), ("r2", False, 0.4)]
    a = next(c for c in claims if c["y"])
    assert a["faithfulness_adapter"] == 0.8 and a["faithfulness_base"] == 0.6
    c = next(c for c in claims if not c["y"])
    assert c["faithfulness_base"] == 0.55 and "faithfulness_adapter" not in c


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")  # as the script: a one-class
@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")  # resample is skipped
@pytest.mark.filterwarnings("ignore:A single label was found")
def test_claim_figures_score_each_reader_at_one_half():
    g = _grounding()
    claims = [
        {"unit": "r1", "y": True, "base": 0.9, "faithfulness_base": 0.4},
        {"unit": "r2", "y": False, "base": 0.85, "faithfulness_base": 0.3},
        {"unit": "r3", "y": True, "base": 0.8, "faithfulness_base": 0.7},
        {"unit": "r4", "y": False, "base": 0.1, "faithfulness_base": 0.2},
    ]
    base = g.claim_figures(claims, "base", resamples=20, seed=0)
    # at 0.5: r1, r2, r3 called grounded -> recall 1, specificity 1/2
    assert base["claim_balanced_accuracy"]["value"] == pytest.approx(0.75)
    assert base["claim_auroc"]["value"] == pytest.approx(0.75)  # r2 (0.85) outranks r3 (0.8): 3 of 4 pairs
    faith = g.claim_figures(claims, "faithfulness_base", resamples=20, seed=0)
    assert faith["claim_balanced_accuracy"]["value"] == pytest.approx(0.75)  # r1 missed, both negatives right
    assert faith["claim_auroc"]["value"] == pytest.approx(1.0)
    assert faith["claim_brier"]["value"] == pytest.approx((0.6**2 + 0.3**2 + 0.3**2 + 0.2**2) / 4)
    assert faith["claims"]["value"] == 4.0


def _labelled(row: str, unit: str, faithful: bool, p: float, overlap: float) -> dict:
    """A cell of a set with a label per claim only (no per-passage gold)."""
    cell = _cell(row, unit, complete=False, partial=False, p=p)
    return cell | {"gold": None, "claim_gold": faithful, "overlap": overlap}


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")
@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")
@pytest.mark.filterwarnings("ignore:A single label was found")
def test_a_set_with_a_label_per_claim_reads_it_and_reports_the_claim_level_only():
    g = _grounding()
    cells = [
        _labelled("a", "g1", True, 0.3, 0.2),
        _labelled("a", "g1", True, 0.9, 0.8),  # the best chunk decides: 0.9, overlap 0.8
        _labelled("b", "g2", False, 0.6, 0.9),
        _labelled("c", "g3", False, 0.2, 0.1),
    ]
    claims = g.claims_of(cells, {"b": {"base": 0.4}})
    assert sorted((c["unit"], c["y"], c["base"], c["overlap"]) for c in claims) == [
        ("g1", True, 0.9, 0.8),
        ("g2", False, 0.6, 0.9),
        ("g3", False, 0.2, 0.1),
    ]
    record = {"sets": {"expertqa_grounding": {"cells": cells, "faithfulness": {"b": {"base": 0.4}}}}}
    figures = g.figures_of(record, resamples=20, seed=0)["expertqa_grounding"]
    assert set(figures) == {"base", "faithfulness_base", "baselines"}  # no per-passage figures: no gold there
    assert figures["base"]["claim_balanced_accuracy"]["value"] == pytest.approx(0.75)  # b called grounded
    assert figures["baselines"]["baseline_claim_word_overlap_auroc"]["value"] == pytest.approx(0.5)


def test_training_sets_load_their_balanced_rows_and_refuse_an_adapter_trained_on_them():
    g = _grounding()
    if not g.set_file("factcg_grounding").is_file():
        pytest.skip(f"{g.set_file('factcg_grounding')} not present (read-only shared data)")
    rows = g.load_rows("factcg_grounding", 30, seed=0)
    assert {r["meta"]["subset"] for r in rows} == {"cg2c_doc"} and len(
        {g.unit_of("factcg_grounding", r) for r in rows}
    ) == 30
    assert all(isinstance(r["gold"]["faithful"], bool) and r["context"] for r in rows)
    trained = {
        "trained": {"data": ["/work/runs/faith/factcg_cg2c_doc_sample.jsonl", "x/expertqa_grounding/train.jsonl"]}
    }
    assert g._trained_on(trained, "factcg_grounding") and g._trained_on(trained, "expertqa_grounding")
    nli = {"trained": {"data": ["../shared/data/train/vitaminc_support/train.jsonl"], "sources": ["vitaminc_support"]}}
    assert not g._trained_on(nli, "factcg_grounding") and not g._trained_on({}, "expertqa_grounding")
    assert g._trained_on({"trained": {"data": ["mix.jsonl"], "sources": ["expertqa_grounding"]}}, "expertqa_grounding")
    assert g._trained_on({"trained": {"data": ["expertqa_grounding/train.jsonl"]}}, "expertqa_grounding")
    started = {"trained": {**nli["trained"], "init": {"path": "a", "init": {"sources": ["expertqa_grounding"]}}}}
    assert g._trained_on(started, "expertqa_grounding") and not g._trained_on(started, "factcg_grounding")
