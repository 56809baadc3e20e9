"""Fitted coefficients are bound to the engine they were fitted on: another engine's results say so.

The coefficients of chunk_relevance v2, chunk_support v3 and answer_relevancy v2 map one model's
features to labels; on another model (measured: answer_relevancy@2 on the 135M, WikiEval pairwise
0.40 against version 1's 0.87) each result carries ``x_warning`` and the run logs it once.
"""

from __future__ import annotations

import json
import logging
from importlib import resources

import pytest

from logitjudge.rubrics.definitions import EvaluatorDef, FittedFor
from logitjudge.rubrics.registry import default_registry

FITTED = FittedFor(model="qwen2.5-coder-1.5b-instruct", fingerprint="f" * 64, prompt_version="lj-prompt-1.1")


def test_the_same_model_by_fingerprint_or_by_name_is_not_flagged():
    engine = {"model": "qwen2.5-coder-1.5b-instruct", "fingerprint": "f" * 64, "prompt_version": "lj-prompt-1.1"}
    assert FITTED.differs_from(engine) is None
    # a bf16 load of the same weights: another fingerprint (it includes the dtype), the same name
    assert FITTED.differs_from({**engine, "fingerprint": "b" * 64}) is None
    # the same weights under another name (a local path): the fingerprint matches
    assert FITTED.differs_from({**engine, "model": "my-copy"}) is None


def test_another_model_or_prompt_is_flagged_and_a_stand_in_is_not():
    other = {"model": "smollm2-135m-instruct", "fingerprint": "a" * 64, "prompt_version": "lj-prompt-1.1"}
    assert FITTED.differs_from(other) == "this engine runs 'smollm2-135m-instruct'"
    prompt = {"model": "qwen2.5-coder-1.5b-instruct", "fingerprint": "f" * 64, "prompt_version": "lj-prompt-2"}
    assert FITTED.differs_from(prompt) == "this engine uses prompt 'lj-prompt-2'"
    assert FITTED.differs_from({"model": "scripted"}) is None  # no fingerprint: not a model


def test_the_warning_names_the_latest_version_without_fitted_coefficients():
    """Versions compare as numbers ("10" after "9", "2" after "1.5"); without such a version,
    or without a registry, the warning says so in general terms."""
    from logitjudge.rubrics.definitions import Catalogue
    from logitjudge.rubrics.registry import Registry
    from logitjudge.rubrics.runner import fitted_warning

    base = default_registry().get("answer_relevancy").model_dump(exclude_none=True)
    plain = default_registry().get("answer_relevancy@1").model_dump(exclude_none=True)
    fitted = dict(base, version="11")
    engine = {"model": "smollm2-135m-instruct", "fingerprint": "a" * 64, "prompt_version": "lj-prompt-1.1"}

    def warning(*plain_versions: str) -> str | None:
        previous = [dict(plain, version=v) for v in plain_versions]
        registry = Registry(Catalogue.model_validate({"format": 1, "evaluators": [fitted], "previous": previous}))
        return fitted_warning(registry.get("answer_relevancy"), engine, registry)

    assert "select answer_relevancy@10, which has none" in (warning("9", "10", "1.5") or "")
    assert "select answer_relevancy@2, which has none" in (warning("1.5", "2") or "")
    assert "select a version without fitted coefficients" in (warning() or "")
    defn = EvaluatorDef.model_validate(fitted)
    assert "select a version without fitted coefficients" in (fitted_warning(defn, engine) or "")
    same = {**engine, "model": "qwen2.5-coder-1.5b-instruct", "fingerprint": defn.fitted_for.fingerprint}
    assert fitted_warning(defn, same) is None


def test_fitted_for_goes_with_fitted_coefficients_only():
    defn = default_registry().get("faithfulness").model_dump()
    defn["fitted_for"] = FITTED.model_dump()
    with pytest.raises(ValueError, match="fitted_for"):
        EvaluatorDef.model_validate(defn)


def test_shipped_coefficients_name_the_shipped_calibrations_model():
    """Every fitted evaluator of the catalogue was fitted on the default model: the engine the
    shipped calibration file names (same fingerprint, prompt version and model name)."""
    (path,) = [p for p in resources.files("logitjudge.calibrations").iterdir() if p.name.endswith(".json")]
    calibrated = json.loads(path.read_text(encoding="utf-8"))["fitted_for"]
    catalogue = json.loads(resources.files("logitjudge.rubrics").joinpath("catalogue.json").read_text("utf-8"))
    fitted = [e for e in catalogue["evaluators"] + catalogue["previous"] if e.get("classes") or e.get("combine")]
    assert {(e["name"], e["version"]) for e in fitted} >= {
        ("chunk_relevance", "2"),
        ("chunk_support", "3"),
        ("answer_relevancy", "2"),
    }
    for e in fitted:
        assert e["fitted_for"] == {k: calibrated[k] for k in ("model", "fingerprint", "prompt_version")}


def test_a_run_on_another_model_flags_fitted_evaluators_once(default_judge, caplog):
    """The suite's 135M is not the model the coefficients were fitted on."""
    items = [
        {"input": "What is the minimum Node version?", "output": "Node 20 or newer.", "context": ["Node 20+."]}
    ] * 2
    with caplog.at_level(logging.WARNING, logger="logitjudge.rubrics"):
        run = default_judge.evaluate(items, ["answer_relevancy@2", "faithfulness"])
    for item in run.results:
        warning = item.results["answer_relevancy"].x_warning
        assert warning is not None and "'qwen2.5-coder-1.5b-instruct'" in warning
        assert "'smollm2-135m-instruct'" in warning
        assert "select answer_relevancy@1, which has none" in warning  # the version without coefficients
        assert item.results["faithfulness"].x_warning is None  # no fitted coefficients
    logged = [r.getMessage() for r in caplog.records if r.name == "logitjudge.rubrics"]
    assert logged == [run.results[0].results["answer_relevancy"].x_warning]


def test_the_server_flags_fitted_evaluators_and_logs_at_start(default_judge, caplog):
    """``POST /api/v1/evaluate`` (both forms) carries the same ``x_warning``; the strict wire
    leaves it out; the server logs each warning once, when the app is built."""
    from fastapi.testclient import TestClient

    from logitjudge.server.app import create_app

    with caplog.at_level(logging.WARNING, logger="logitjudge.server"):
        app = create_app(default_judge)
    logged = [r.getMessage() for r in caplog.records if r.name == "logitjudge.server"]
    assert any("answer_relevancy@2's coefficients" in m for m in logged)
    item = {"input": "What is the minimum Node version?", "output": "Node 20 or newer."}
    with TestClient(app) as client:
        one = client.post("/api/v1/evaluate", json={**item, "evaluators": ["answer_relevancy@2"]}).json()
        batch = client.post("/api/v1/evaluate", json={"items": [item], "evaluators": ["answer_relevancy@2"]}).json()
        strict = client.post(
            "/api/v1/evaluate", json={**item, "evaluators": ["answer_relevancy@2"], "x_strict_wire": True}
        ).json()
    assert "'smollm2-135m-instruct'" in one["results"]["answer_relevancy"]["x_warning"]
    assert "select answer_relevancy@1, which has none" in one["results"]["answer_relevancy"]["x_warning"]
    assert (
        batch["results"][0]["results"]["answer_relevancy"]["x_warning"]
        == one["results"]["answer_relevancy"]["x_warning"]
    )
    assert "x_warning" not in strict["results"]["answer_relevancy"]


def test_a_definition_of_your_own_without_fitted_for_still_loads():
    defn = default_registry().get("answer_relevancy@2").model_dump()
    defn.pop("fitted_for")
    assert EvaluatorDef.model_validate(defn).fitted_for is None


def test_the_warning_does_not_name_a_version_that_reads_a_head():
    """chunk_support@4 has no fitted coefficients but reads a trained head, and on another model
    (no head for it) version 3 answers: the warning on @3 names @1, the one that helps there."""
    from logitjudge.rubrics.runner import fitted_warning

    registry = default_registry()
    engine = {"model": "smollm2-135m-instruct", "fingerprint": "a" * 64, "prompt_version": "lj-prompt-1.1"}
    said = fitted_warning(registry.get("chunk_support@3"), engine, registry) or ""
    assert "select chunk_support@1, which has none" in said and "@4" not in said
