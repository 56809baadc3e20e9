"""Low option mass in dataset evaluations: carried per result, counted per evaluator.

Regression: at 8,192 tokens ``x_option_mass`` was 0.0019 (the model put 0.2 % of its probability
on the answer labels) and neither the results file nor the ``evaluate`` summary said so. The
real model's low mass on a long state is checked in ``test_evaluate_real_model.py``.
"""

from __future__ import annotations

import pytest

from logitjudge.engine.types import Answer, EngineResult, Usage
from logitjudge.rubrics.aggregate import summarize
from logitjudge.rubrics.api import to_item
from logitjudge.rubrics.registry import default_registry
from logitjudge.rubrics.runner import finish_plan, plan_item

LOW_OPTION_MASS = 0.05  # logitjudge.settings.LOW_OPTION_MASS (checked below)


def test_each_result_carries_the_lowest_option_mass_of_its_answers():
    reg = default_registry()
    item = to_item({"id": "i", "input": "q", "output": "a", "context": ["c0", "c1"]})
    plan = plan_item(item, reg.select(["chunk_relevance@1", "faithfulness"]), strict=False)
    masses = {"chunk_relevance": [0.3, 0.002], "faithfulness": [0.6]}
    by_id = {}
    for sel, qids in plan.owners:
        for qid, mass in zip(qids, masses[sel.name], strict=True):
            by_id[qid] = Answer("noul", (0.7, 0.3), option_mass=mass)
    result = EngineResult(tuple(by_id[qid] for qid in plan.questions), Usage(input_tokens=0))
    # faithfulness's contrast twin (the question without `context`) answers on less mass still
    twin = EngineResult((Answer("noul", (0.5, 0.5), option_mass=0.4),), Usage(input_tokens=0))
    res = finish_plan(plan, result, {}, twin)
    assert res.results["chunk_relevance"].x_option_mass == pytest.approx(0.002)  # the weakest chunk
    assert res.results["faithfulness"].x_option_mass == pytest.approx(0.4)  # the weaker of its two answers
    dumped = res.model_dump(mode="json", exclude_none=True)
    assert dumped["results"]["chunk_relevance"]["x_option_mass"] == pytest.approx(0.002)


def test_the_summary_counts_results_under_the_threshold_per_evaluator():
    from logitjudge import settings

    assert settings.LOW_OPTION_MASS == LOW_OPTION_MASS

    def row(mass, name="faithfulness"):
        return {"results": {name: {"status": "ok", "score": 0.5, "passed": True, "x_option_mass": mass}}}

    rows = [row(0.0019), row(0.0499), row(LOW_OPTION_MASS), row(0.7), row(0.9, "conciseness")]
    rows.append({"results": {"faithfulness": {"status": "skipped", "reason": "missing"}}})
    summary = summarize(rows)
    low = summary["faithfulness"].metric("low_option_mass")
    assert low is not None and low.value == pytest.approx(0.5) and low.n == 4  # at the threshold: not low
    assert low.higher_is_better is False
    assert summary["conciseness"].value("low_option_mass") == 0.0
    # rows from before the field existed: no metric rather than a made-up 0
    assert (
        summarize([{"results": {"faithfulness": {"status": "ok", "score": 1.0}}}])["faithfulness"].metric(
            "low_option_mass"
        )
        is None
    )
