"""The vLLM backend's tests: one vLLM engine per session (``vllm_judge``), the default model.

They need vLLM, which lives in its own environment (``make vllm-env`` -> ``.venv-vllm``; ``make
test`` runs this directory there with ``LOGITJUDGE_TEST_VLLM=1``). Without vLLM the directory is
skipped, except under ``LOGITJUDGE_TEST_VLLM=1``, where a missing vLLM is an error: CI must not
pass by skipping them.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

REQUIRED = os.environ.get("LOGITJUDGE_TEST_VLLM") == "1"
HAVE_VLLM = importlib.util.find_spec("vllm") is not None

if not HAVE_VLLM and not REQUIRED:
    collect_ignore_glob = ["test_*.py"]

KV_CACHE_GIB = 1  # two engines (this one and the served one) fit a 2-core CI machine's memory


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if REQUIRED and not HAVE_VLLM:
        raise pytest.UsageError("LOGITJUDGE_TEST_VLLM=1 but vLLM is not installed here (make vllm-env)")


@pytest.fixture(scope="session")
def vllm_judge():
    """The default model on the vLLM backend (fp32 on CPU, block size 32), started once per session."""
    from logitjudge import Judge
    from logitjudge.engine.config import VllmConfig

    judge = Judge.load(backend="vllm", vllm=VllmConfig(kv_cache_gib=KV_CACHE_GIB))
    yield judge
    judge.close()


@pytest.fixture(scope="session")
def default_judge():
    """The transformers reference for the vLLM tests: the default model in fp32, as vLLM runs it
    on CPU (``auto`` is mixed precision on a CPU with native bf16, which vLLM does not run)."""
    from logitjudge import Judge

    return Judge.load(dtype="float32")
