"""Which model ``--model``-less commands and ``Judge.load()`` load: ``LOGITJUDGE_MODEL``, else
the main model (:data:`logitjudge.settings.MAIN_MODEL`); a missing default names the fix."""

from __future__ import annotations

import dataclasses

import pytest

from logitjudge.engine import model as model_mod
from logitjudge.engine.packaged import PACKAGED_MODELS
from logitjudge.errors import UnsupportedModelError
from logitjudge.settings import EMBEDDED_MODEL, MAIN_MODEL, default_model


def test_the_default_is_the_main_model_unless_the_environment_names_one(monkeypatch):
    monkeypatch.delenv("LOGITJUDGE_MODEL", raising=False)
    assert default_model() == MAIN_MODEL == "qwen2.5-coder-1.5b"
    assert MAIN_MODEL in PACKAGED_MODELS
    monkeypatch.setenv("LOGITJUDGE_MODEL", "  ")
    assert default_model() == MAIN_MODEL
    monkeypatch.setenv("LOGITJUDGE_MODEL", EMBEDDED_MODEL)
    assert default_model() == "smollm2-135m"


def test_the_suite_runs_on_the_embedded_model(default_judge):
    assert default_judge.describe()["model"] == "smollm2-135m-instruct"


def test_a_default_that_is_not_installed_names_the_extra_and_the_embedded_model(monkeypatch):
    monkeypatch.delenv("LOGITJUDGE_MODEL", raising=False)
    spec = PACKAGED_MODELS[MAIN_MODEL]
    missing = dataclasses.replace(spec, packages=("logitjudge-test-no-such-part",))
    monkeypatch.setitem(PACKAGED_MODELS, MAIN_MODEL, missing)
    with pytest.raises(UnsupportedModelError) as err:
        model_mod.load_model(None)
    msg = str(err.value)
    assert "logitjudge[qwen15b]" in msg and "--model smollm2-135m" in msg and "LOGITJUDGE_MODEL" in msg
    with pytest.raises(UnsupportedModelError) as named:  # named explicitly: the plain message
        model_mod.load_model(MAIN_MODEL)
    assert "logitjudge[qwen15b]" in str(named.value) and "smollm2-135m" not in str(named.value)
