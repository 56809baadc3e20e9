"""Shared fixtures. Append new fixtures below; do not rewrite others' (several people edit this)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Test helpers live in tests/support (not in the package): `from support.scripted import ...`.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# No model hub, ever: the default model is embedded and converted locally.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The suite's model is the embedded SmolLM2-135M (fast, exact maths, behaviour of the engine);
# the main job's default (logitjudge.settings.MAIN_MODEL) is an optional 1.1 GB install.
os.environ.setdefault("LOGITJUDGE_MODEL", "smollm2-135m")


@pytest.fixture(scope="session")
def default_judge():
    """The suite's model (SmolLM2-135M-Instruct, fp32 on CPU; ``LOGITJUDGE_MODEL``), loaded once per test session."""
    from logitjudge import Judge

    return Judge.load()
