"""The quality benchmark tells the truth: representative samples, two-sided length baselines,
bootstrap intervals, one metric per column (issue 15, part 1).

Regression: the old "stratified" sampler took gold values in turn in file order, so jevbench's
24 rows were 17 choice / 3 noul / 4 score (the data: 70 / 200 / 30), QAGS never drew XSum and
sys1bench never drew its phishing questions. No model is loaded here.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from logitjudge.rubrics.samples import (
    allocate,
    auroc,
    bootstrap_interval,
    item_group,
    length_baseline_auroc,
    length_baseline_pairwise,
    stratified_sample,
    stratum_of,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"


def _rows(name: str) -> list[dict]:
    path = DATA / name / "dev.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present (read-only shared data)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _quality():
    """benchmarks/quality/quality.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("quality_bench", ROOT / "benchmarks" / "quality" / "quality.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("quality_bench", module)
    spec.loader.exec_module(module)
    return module


# -- the sampler -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["jevbench", "qags", "sys1bench_canary"])
@pytest.mark.parametrize("limit", [24, 60])
def test_sample_shares_of_type_gold_and_source_match_the_data(name, limit):
    rows = _rows(name)
    sample = stratified_sample(rows, limit, seed=0)
    assert len(sample) == limit
    tolerance = max(0.03, 1.0 / limit) + 1e-9  # within one row at 24, three points at 60
    for level, what in enumerate(("type", "gold", "source")):
        data = Counter(stratum_of(r)[level] for r in rows)
        got = Counter(stratum_of(r)[level] for r in sample)
        for value, count in data.items():
            share_data, share_sample = count / len(rows), got[value] / limit
            assert abs(share_sample - share_data) <= tolerance, (name, what, value, share_sample, share_data)


def test_the_three_reported_failures_are_gone():
    jev = Counter(stratum_of(r)[0] for r in stratified_sample(_rows("jevbench"), 24, seed=0))
    assert jev["noul"] == 16 and jev["choice"] in (5, 6) and jev["score"] in (2, 3)  # 200/70/30 of 300
    qags = Counter(stratum_of(r)[2] for r in stratified_sample(_rows("qags"), 24, seed=0))
    assert qags == {"cnndm": 12, "xsum": 12}
    sys1 = Counter(stratum_of(r)[2] for r in stratified_sample(_rows("sys1bench_canary"), 24, seed=0))
    assert sys1["email_security"] == 12  # the phishing questions


@pytest.mark.parametrize("name", ["jevbench", "qags", "sys1bench_canary", "evouna", "vitaminc"])
def test_every_stratum_with_enough_rows_appears(name):
    rows = _rows(name)
    limit = 30
    sizes = Counter(stratum_of(r) for r in rows)
    got = Counter(stratum_of(r) for r in stratified_sample(rows, limit, seed=3))
    for stratum, size in sizes.items():
        if size * limit / len(rows) >= 1:  # its proportional quota is at least one row
            assert got[stratum] >= 1, stratum


def test_sampling_is_deterministic_for_a_seed_and_varies_with_it():
    rows = _rows("jevbench")
    ids = [r["id"] for r in stratified_sample(rows, 24, seed=7)]
    assert ids == [r["id"] for r in stratified_sample(rows, 24, seed=7)]
    other = [r["id"] for r in stratified_sample(rows, 24, seed=8)]
    assert other != ids
    by_id = {r["id"]: r for r in rows}
    assert Counter(stratum_of(by_id[i])[0] for i in other) == Counter(stratum_of(by_id[i])[0] for i in ids)
    assert ids == [r["id"] for r in rows if r["id"] in set(ids)]  # file order


def test_pairs_are_sampled_whole():
    rows = _rows("wikieval")
    sample = stratified_sample(rows, 24, seed=0)
    pairs = Counter(r["gold"]["pair"] for r in sample)
    assert len(sample) == 24 and set(pairs.values()) == {2}
    evaluators = Counter(r["evaluator"] for r in sample)
    assert all(v >= 6 for v in evaluators.values()) and len(evaluators) == 3


def test_types_filter_keeps_one_question_type_before_sampling():
    quality = _quality()
    rows = _rows("jevbench")
    kinds = Counter(stratum_of(r)[0] for r in rows)
    every = quality.select_rows(rows, None, types=frozenset({"choice"}))
    assert len(every) == kinds["choice"] == 70
    sample = quality.select_rows(rows, 30, seed=0, types=frozenset({"choice", "score"}))
    assert len(sample) == 30
    assert Counter(stratum_of(r)[0] for r in sample) == {"choice": 21, "score": 9}  # 70:30 of the rows
    assert quality.select_rows(rows, None, types=frozenset({"faithfulness"})) == []


def test_allocate_is_proportional_by_largest_remainder():
    alloc = allocate({("noul",): 200, ("choice",): 70, ("score",): 30}, 24)
    assert sum(alloc.values()) == 24
    assert alloc[("noul",)] == 16 and {alloc[("choice",)], alloc[("score",)]} <= {2, 3, 5, 6}
    small = allocate({("a",): 1, ("b",): 99}, 50)
    assert small[("a",)] <= 1 and small[("b",)] == 50 - small[("a",)]  # never more than its rows


def test_item_group_keeps_the_answers_of_one_source_item_together():
    for name, key in (("halueval_qa", "source_row"), ("jevbench", "case"), ("truthfulqa", "source_row")):
        rows = _rows(name)
        groups: dict = {}
        for r in rows:
            groups.setdefault(r["meta"][key], set()).add(item_group(r["id"]))
        assert all(len(g) == 1 for g in groups.values()), name  # one source item -> one group
        assert len({item_group(r["id"]) for r in rows}) == len(groups), name  # and not coarser
    wiki = _rows("wikieval")
    assert all(item_group(r["id"]) == item_group(r["gold"]["pair"]) for r in wiki)


# -- statistics --------------------------------------------------------------------------------


def test_auroc_equals_scikit_learn_with_ties():
    rng = np.random.default_rng(0)
    truth = rng.random(300) < 0.4
    scores = np.round(rng.random(300) + 0.3 * truth, 1)  # many ties
    assert auroc(truth, scores) == pytest.approx(roc_auc_score(truth, scores), abs=1e-12)
    assert auroc([True, True], [0.1, 0.2]) is None


def test_length_baseline_takes_the_better_direction():
    rng = np.random.default_rng(1)
    passed = rng.random(200) < 0.5
    longer_passes = np.where(passed, 300, 100) + rng.integers(0, 150, 200)
    value, direction = length_baseline_auroc(passed.tolist(), longer_passes.tolist())
    assert direction == "longer" and value > 0.8
    assert value == pytest.approx(roc_auc_score(passed, longer_passes))
    value2, direction2 = length_baseline_auroc(passed.tolist(), (-longer_passes).tolist())
    assert direction2 == "shorter" and value2 == pytest.approx(value)
    assert length_baseline_pairwise([(300, 100), (250, 90), (80, 120)]) == pytest.approx((2 / 3, "longer"))
    assert length_baseline_pairwise([(10, 100), (20, 90)]) == (1.0, "shorter")


def _records_longer_passes(n: int) -> list[dict]:
    """Faithfulness result rows where the longer output passes and the judge says 0.6 always."""
    out = []
    for i in range(n):
        faithful = i % 2 == 0
        out.append(
            {
                "id": f"toy:{i}",
                "results": {
                    "faithfulness": {
                        "name": "faithfulness",
                        "status": "ok",
                        "score": 0.6 + 0.001 * (i % 3),
                        "passed": True,
                        "probabilities": {"yes": 0.6, "no": 0.4},
                    }
                },
                "gold": {"passed": {"faithfulness": faithful}},
                "x_lengths": {"output": 400 + i if faithful else 50 + i, "context": 1000},
            }
        )
    return out


def test_the_benchmark_reports_a_longer_passes_baseline():
    quality = _quality()
    (row,) = quality.group_metrics("toy", _records_longer_passes(40), resamples=200)
    base = row["figures"]["length_baseline_auroc"]
    assert row["kind"] == "binary" and base["direction"] == "longer" and base["value"] == 1.0
    assert row["length_baseline"] == 1.0 and row["length_direction"] == "longer"
    delta = row["figures"]["auroc_minus_length_baseline"]
    assert delta["value"] < 0 and delta["hi"] < 0  # a one-sided "shorter" baseline would say 0.0


def test_best_threshold_accuracy_tries_every_cut():
    best = _quality().best_threshold_accuracy
    gold, p = np.array([1, 0, 1, 1, 0]), np.array([0.9, 0.8, 0.7, 0.2, 0.1])
    brute = max(((p >= t) == gold).mean() for t in [*p.tolist(), 2.0])
    assert best(gold, p) == brute == 0.8
    assert best(np.array([0, 1]), np.array([0.5, 0.5])) == 0.5  # a tie cannot be split
    assert best(np.array([1, 1, 0]), np.array([0.1, 0.2, 0.3])) == 2 / 3  # passing everything
    rng = np.random.default_rng(0)
    for _ in range(20):
        g, q = rng.integers(0, 2, 30), rng.integers(0, 8, 30) / 8
        assert best(g, q) == pytest.approx(max(((q >= t) == g).mean() for t in [*q.tolist(), 2.0]))
    (row,) = _quality().group_metrics("toy", _records_longer_passes(40), resamples=50)
    figs = row["figures"]
    assert figs["best_threshold_accuracy"]["value"] >= figs["accuracy"]["value"]


def test_bootstrap_interval_contains_the_estimate_and_narrows_with_n():
    rng = np.random.default_rng(2)
    widths = []
    for n in (40, 400):
        x = (rng.random(n) < 0.3).astype(float)
        ci = bootstrap_interval(lambda i, x=x: float(x[i].mean()), [str(k) for k in range(n)], seed=0)
        assert ci["lo"] <= x.mean() <= ci["hi"] and ci["resamples"] == 1000
        widths.append(ci["hi"] - ci["lo"])
    assert widths[1] < 0.5 * widths[0]  # about 1/sqrt(10) as wide
    x = (rng.random(50) < 0.5).astype(float)
    groups = [str(k) for k in range(50)]
    first = bootstrap_interval(lambda i: float(x[i].mean()), groups, seed=5)
    assert first == bootstrap_interval(lambda i: float(x[i].mean()), groups, seed=5)


def test_bootstrap_resamples_whole_source_items():
    rng = np.random.default_rng(4)
    x = np.repeat((rng.random(50) < 0.5).astype(float), 4)  # 50 items, each counted 4 times
    as_rows = bootstrap_interval(lambda i: float(x[i].mean()), [str(k) for k in range(200)])
    as_items = bootstrap_interval(lambda i: float(x[i].mean()), [str(k // 4) for k in range(200)])
    assert (as_items["hi"] - as_items["lo"]) > 1.5 * (as_rows["hi"] - as_rows["lo"])


def test_undefined_draws_are_dropped_and_too_many_give_no_interval():
    truth = np.array([True] + [False] * 39)
    scores = np.linspace(0, 1, 40)
    ci = bootstrap_interval(lambda i: auroc(truth[i], scores[i]), [str(k) for k in range(40)], seed=0)
    assert ci is None or ci["resamples"] < 1000  # one positive: most draws have none
    assert bootstrap_interval(lambda i: None, ["a", "b"]) is None


# -- the tables --------------------------------------------------------------------------------


def test_a_figure_on_fewer_than_20_items_is_marked():
    quality = _quality()
    assert "†" in quality._cell({"value": 0.5, "n": 19, "lo": 0.3, "hi": 0.7})
    assert "†" not in quality._cell({"value": 0.5, "n": 20, "lo": 0.3, "hi": 0.7})
    record = {
        "config": {"limit": 4, "rotations": 1, "calibration": None},
        "environment": {
            "engine": {"model": "m", "fingerprint": "f" * 64, "dtype": "float32", "device": "cpu"},
            "hardware": {"cpu": "Some CPU", "cpu_cores": 2},
        },
        "sets": {"toy": {"n_items": 8, "elapsed_s": 1.0, "items_per_s": 8.0, "input_tokens": 80}},
        "metrics": quality.group_metrics("toy", _records_longer_passes(8), resamples=50),
    }
    md = quality.markdown_table(record)
    assert "| toy | faithfulness | 8† |" in md and "0.500† [" in md
    assert "dtype float32" in md and "fingerprint `ffffffffffffffff`" in md and "Some CPU" in md


def test_chunk_support_has_no_binary_auroc_beside_its_3_way_accuracy():
    quality = _quality()
    rec = {
        "id": "vitaminc:0",
        "results": {
            "chunk_support": {
                "name": "chunk_support",
                "status": "ok",
                "score": 1.0,
                "passed": True,
                "details": [
                    {"label": "supports", "probabilities": {"supports": 0.6, "contradicts": 0.3, "unrelated": 0.1}}
                ],
            }
        },
        "gold": {"passed": {"chunk_support": False}, "chunks": {"chunk_support": ["contradicts"]}},
        "x_lengths": {"output": 10, "context": 100},
    }
    rows = quality.group_metrics("vitaminc", [rec, {**rec, "id": "vitaminc:90"}], resamples=20)
    assert [r["kind"] for r in rows] == ["three_way"]
    assert "auroc" not in rows[0]["figures"] and "length_baseline_auroc" not in rows[0]["figures"]
    assert rows[0]["accuracy"] == 0.0 and rows[0]["figures"]["nll"]["value"] == pytest.approx(-np.log(0.3))


def test_choice_samples_of_two_and_more_options_pool_as_multiclass():
    """TruthfulQA-style choices (2..10 options) crashed the 100-row run; top_label pools them."""
    from logitjudge.rubrics.samples import Sample, sample_arrays

    samples = [Sample("a:1", "q", "choice", (0.7, 0.3), 0), Sample("b:1", "q", "choice", (0.2, 0.5, 0.3), 1)]
    with pytest.raises(ValueError):
        sample_arrays(samples)
    arr = sample_arrays(samples, top_label=True)
    assert arr["hit"].tolist() == [True, True]
    assert arr["brier"][0] == pytest.approx(0.3**2 + 0.3**2)  # multi-class, not binary
    assert arr["score"].tolist() == [0.7, 0.5]


def test_batch_calibrated_rows_group_by_question_and_rescore_every_field():
    quality = _quality()
    from logitjudge.rubrics.debias import MIN_BATCH, batch_calibrate

    def row(i, question, probs):
        answer = {"type": "choice", "choice": max(probs, key=probs.get), "probabilities": probs, "confidence": 0.5}
        res = {"name": "typed_question", "version": "1", "status": "ok", "label": answer["choice"], "answer": answer}
        return {"id": f"r{i}", "question": question, "results": {"typed_question": res}, "gold": {}}

    q = {"key": "team", "type": "choice", "instructions": "Which team?", "criteria": {"a": "x", "b": "y"}}
    shuffled = {**q, "key": "other-key", "criteria": {"b": "y", "a": "x"}}  # the same question
    other = {**q, "instructions": "Which team would a new agent pick?"}  # same options, another question
    rows = [
        row(i, q if i % 2 else shuffled, {"a": 0.8, "b": 0.2} if i % 3 else {"a": 0.6, "b": 0.4}) for i in range(12)
    ]
    rows += [row(12 + i, other, {"a": 0.8, "b": 0.2}) for i in range(MIN_BATCH - 1)]
    out = quality.batch_calibrated_rows(rows)
    adjusted = [r["results"]["typed_question"] for r in out[:12]]
    expected = batch_calibrate(
        np.array([[r["results"]["typed_question"]["answer"]["probabilities"][k] for k in "ab"] for r in rows[:12]])
    )
    for res, e in zip(adjusted, expected, strict=True):
        assert [res["answer"]["probabilities"][k] for k in "ab"] == pytest.approx(e.tolist())
        assert res["answer"]["choice"] == res["label"] == "ab"[int(e.argmax())]  # rescored, not stale
    assert out[12:] == rows[12:]  # another question, asked fewer than MIN_BATCH times: as answered
    # the judge says "a" to all 12; with its lean divided out the four weaker "a"s become "b"
    assert {r["results"]["typed_question"]["answer"]["choice"] for r in rows[:12]} == {"a"}
    assert [i for i, res in enumerate(adjusted) if res["answer"]["choice"] == "b"] == [0, 3, 6, 9]
