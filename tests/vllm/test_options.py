"""vLLM's options are checked where we can check them, before any engine starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from logitjudge.engine.config import EngineConfig, VllmConfig
from logitjudge.engine.vllm_backend import VllmBackend
from logitjudge.errors import ConfigurationError, UnsupportedModelError


def test_a_cpu_block_size_vllm_cannot_run_is_refused_naming_it() -> None:
    with pytest.raises(UnsupportedModelError, match="block_size 16"):
        VllmBackend(Path("unused"), VllmConfig(block_size=16), dtype="float32", max_model_len=64, device="cpu")


@pytest.mark.parametrize(
    ("field", "value"),
    [("tensor_parallel_size", 0), ("block_size", 0), ("kv_cache_gib", 0), ("gpu_memory_utilization", 1.5)],
)
def test_out_of_range_options_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        VllmConfig(**{field: value})


def test_an_unknown_executor_or_backend_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="executor"):
        VllmConfig(distributed_executor_backend="slurm")
    with pytest.raises(ConfigurationError, match="backend"):
        EngineConfig(backend="tgi")
