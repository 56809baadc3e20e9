"""Dataset aggregates against hand-computed values; undetermined figures are null with a reason."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from logitjudge.rubrics.aggregate import Gold, ece_noise_floor, expected_calibration_error, gold_of, summarize


def _row(name, score, passed, gold=None, **extra):
    res = {"name": name, "version": "1", "status": "ok", "score": score, "passed": passed, **extra}
    return {"results": {name: res}, "gold": (gold or Gold()).model_dump(mode="json")}


def test_counts_mean_and_pass_rate():
    rows = [
        _row("faithfulness", 0.9, True),
        _row("faithfulness", 0.2, False),
        _row("faithfulness", 0.7, True),
        {"results": {"faithfulness": {"name": "faithfulness", "version": "1", "status": "skipped", "reason": "x"}}},
        {"results": {"faithfulness": {"name": "faithfulness", "version": "1", "status": "error", "reason": "y"}}},
    ]
    s = summarize(rows)["faithfulness"]
    assert (s.n, s.skipped, s.errors) == (3, 1, 1)
    assert s.value("mean_score") == pytest.approx(0.6)
    assert s.value("pass_rate") == pytest.approx(2 / 3)
    assert s.metric("mean_score").stderr == pytest.approx(
        math.sqrt(((0.3**2) + (0.4**2) + (0.1**2)) / 2) / math.sqrt(3)
    )
    assert s.metric("precision") is None  # no gold labels: no P/R/F1 records at all


def test_precision_recall_f1_accuracy_auroc():
    # (pred, gold, score): TP, FP, FN, TP, TN
    data = [(True, True, 0.9), (True, False, 0.8), (False, True, 0.3), (True, True, 0.7), (False, False, 0.1)]
    rows = [_row("faithfulness", sc, p, Gold(passed={"faithfulness": g})) for p, g, sc in data]
    s = summarize(rows)["faithfulness"]
    assert s.value("precision") == pytest.approx(2 / 3)
    assert s.value("recall") == pytest.approx(2 / 3)
    assert s.value("f1") == pytest.approx(2 / 3)
    assert s.value("accuracy") == pytest.approx(3 / 5)
    # positives 0.9, 0.3, 0.7 vs negatives 0.8, 0.1: 4 of 6 pairs ranked right
    assert s.value("auroc") == pytest.approx(4 / 6)
    failed = summarize(rows, positive="failed")["faithfulness"]
    # failure detection: predicted failed {3rd, 5th}, gold failed {2nd, 5th}: TP 1, FP 1, FN 1
    assert failed.value("precision") == pytest.approx(0.5)
    assert failed.value("recall") == pytest.approx(0.5)


def test_zero_denominator_is_null_with_a_reason_never_nan():
    rows = [_row("faithfulness", 0.1, False, Gold(passed={"faithfulness": True})) for _ in range(3)]
    s = summarize(rows)["faithfulness"]
    p = s.metric("precision")
    assert p.value is None and p.reason == "no item was predicted positive"
    assert s.value("recall") == 0.0
    assert s.value("accuracy") == 0.0
    auroc = s.metric("auroc")
    assert auroc.value is None and "both gold classes" in auroc.reason
    text = json.dumps({k: v.model_dump() for k, v in summarize(rows).items()}, allow_nan=False)
    assert "NaN" not in text


def test_pairwise_accuracy_with_ties_and_the_soft_score():
    rows = []
    for pair, good, bad in (("p1", 0.8, 0.3), ("p2", 0.5, 0.5), ("p3", 0.2, 0.6)):
        rows.append(_row("answer_relevancy", good, None, Gold(pair={"answer_relevancy": (pair, True)})))
        rows.append(_row("answer_relevancy", bad, None, Gold(pair={"answer_relevancy": (pair, False)})))
    rows.append(_row("answer_relevancy", 0.9, None, Gold(pair={"answer_relevancy": ("lonely", True)})))
    s = summarize(rows)["answer_relevancy"]
    assert s.value("pairwise_accuracy") == pytest.approx(0.5)  # (1 + 0.5 + 0) / 3
    assert s.metric("pairwise_accuracy").n == 3
    assert s.value("pairwise_ties") == 1
    # chunk_relevance ranks by x_soft_score: both items have precision 1/1, the soft score breaks the tie
    cr = [
        _row("chunk_relevance", 1.0, True, Gold(pair={"chunk_relevance": ("c", True)}), x_soft_score=0.9),
        _row("chunk_relevance", 1.0, True, Gold(pair={"chunk_relevance": ("c", False)}), x_soft_score=0.6),
    ]
    assert summarize(cr)["chunk_relevance"].value("pairwise_accuracy") == 1.0


def test_length_baselines():
    rows = [
        {**_row("faithfulness", 0.6, True, Gold(passed={"faithfulness": True})), "x_lengths": {"output": 10}},
        {
            **_row("faithfulness", 0.4, False, Gold(passed={"faithfulness": False})),
            "x_lengths": {"output": 50},
        },
        {
            **_row("answer_relevancy", 0.6, None, Gold(pair={"answer_relevancy": ("p", True)})),
            "x_lengths": {"output": 80},
        },
        {
            **_row("answer_relevancy", 0.4, None, Gold(pair={"answer_relevancy": ("p", False)})),
            "x_lengths": {"output": 20},
        },
    ]
    s = summarize(rows)
    assert s["faithfulness"].value("length_baseline_auroc") == 1.0  # the shorter one is the faithful one
    assert s["answer_relevancy"].value("length_baseline_pairwise_accuracy") == 0.0


def test_chunk_support_chunk_level_metrics():
    details = [
        {"index": i, "label": lab, "score": 0, "confidence": 0, "passed": lab != "contradicts"}
        for i, lab in enumerate(["supports", "unrelated", "contradicts", "supports"])
    ]
    gold = Gold(
        chunks={"chunk_support": ["supports", "contradicts", "contradicts", "unrelated"]},
        passed={"chunk_support": False},
    )
    s = summarize([_row("chunk_support", 0.25, False, gold, details=details)])["chunk_support"]
    assert s.value("chunk_accuracy") == 0.5
    # per label F1: supports 2/3 (P 1/2, R 1), contradicts 2/3 (P 1, R 1/2), unrelated 0
    assert s.value("chunk_macro_f1") == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)
    assert s.value("accuracy") == 1.0  # item level: predicted fail, gold fail


def test_typed_question_accuracy_and_unknown():
    def typed(answer, gold):
        return {
            "results": {
                "typed_question": {
                    "name": "typed_question",
                    "version": "1",
                    "status": "ok",
                    "score": None,
                    "passed": None,
                    "answer": answer,
                }
            },
            "gold": gold.model_dump(mode="json"),
        }

    rows = [
        typed({"type": "noul", "noul": 0.8}, Gold(answer=True)),
        typed({"type": "noul", "noul": 0.8}, Gold(answer=False)),
        typed(
            {"type": "choice", "choice": "billing", "probabilities": {"billing": 0.6, "sales": 0.4}},
            Gold(answer="billing"),
        ),
        typed({"type": "score", "score": 1.2, "probabilities": {"0": 0.1, "1": 0.6, "2": 0.3}}, Gold(answer=2)),
        typed({"type": "noul", "noul": 0.1}, Gold(unknown=True)),
    ]
    s = summarize(rows)["typed_question"]
    assert s.value("accuracy") == pytest.approx(2 / 4)
    assert s.value("accuracy_noul") == 0.5 and s.value("accuracy_choice") == 1.0 and s.value("accuracy_score") == 0.0
    assert s.value("mae_level") == pytest.approx(0.8)
    assert s.value("gold_unknown") == 1


def test_gold_of_reads_the_data_sets_gold_fields():
    assert gold_of({"evaluator": "faithfulness", "gold": {"faithful": False, "hallucinated": True}}).passed == {
        "faithfulness": False
    }
    assert gold_of({"evaluator": "answer_correctness", "gold": {"correct": True}}).passed == {
        "answer_correctness": True
    }
    assert gold_of({"evaluator": "context_recall", "gold": {"recall": 0.0}}).passed == {"context_recall": False}
    cs = gold_of({"evaluator": "chunk_support", "gold": {"per_chunk": ["contradicts"], "label": "contradicts"}})
    assert cs.chunks == {"chunk_support": ["contradicts"]} and cs.passed == {"chunk_support": False}
    pair = gold_of({"evaluator": "chunk_relevance", "gold": {"preferred_in_pair": True, "pair": "w:0:cr"}})
    assert pair.pair == {"chunk_relevance": ("w:0:cr", True)}
    typed = gold_of({"evaluator": "multiple_choice", "gold": {"answer": "o4"}})
    assert typed.answer == "o4"
    assert gold_of({"evaluator": "generic_yesno", "gold": {"answer": "unknown", "unknown": True}}).unknown
    explicit = gold_of({"labels": {"faithfulness": True}, "context_labels": [True, False]})
    assert explicit.passed == {"faithfulness": True}
    assert explicit.chunks == {"chunk_relevance": ["relevant", "not_relevant"]}


def test_ece():
    assert expected_calibration_error([0.95, 0.95, 0.05, 0.05], [True, True, False, False]) == pytest.approx(0.05)


def test_ece_noise_floor_is_the_mean_ece_of_labels_drawn_from_the_scores():
    rng = np.random.default_rng(7)
    scores = rng.random(60)
    # the same quantity by a plain loop over draws
    loop = np.mean(
        [expected_calibration_error(scores.tolist(), (rng.random(60) < scores).tolist()) for _ in range(2000)]
    )
    assert ece_noise_floor(scores, draws=2000) == pytest.approx(loop, abs=0.01)
    # it falls like 1/sqrt(n): at the held-out sizes of a calibration (50-100 items) it is about
    # 0.10-0.14, so an ECE target of 0.05 cannot be verified there
    floors = [ece_noise_floor(rng.random(n)) for n in (50, 200, 5000)]
    assert floors[0] > 0.1 > floors[1] > 0.05 and floors[2] < 0.02
    # certain predictions have no noise; no scores, no floor
    assert ece_noise_floor([0.0, 1.0, 1.0]) == 0.0 and ece_noise_floor([]) == 0.0
