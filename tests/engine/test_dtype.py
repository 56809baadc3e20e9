"""dtype policy: ``auto`` on CPU is mixed precision where the CPU computes bf16 natively (the state
in bf16, questions in fp32: isolation within 1e-4), else fp32; pure bf16 only when asked, with
its measured bound.

Machines of the same kind differ in CPU (AVX2 only, or AVX-512 with bf16). The policy tests force
each branch of the CPU probe on any machine, so they cannot skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_parity import QUESTIONS, STATE, max_diff

from logitjudge.engine import model as model_mod
from logitjudge.engine import precision
from logitjudge.engine.core import TOLERANCES, Engine, tolerance_for
from logitjudge.engine.types import EngineRequest
from logitjudge.errors import ConfigurationError

BF16_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16 amx_tile\n"
AVX2_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
CPU = torch.device("cpu")


@pytest.mark.parametrize("native_bf16", [True, False])
def test_auto_is_mixed_on_a_cpu_with_native_bf16_else_float32(monkeypatch, native_bf16):
    """Forces each branch of the CPU probe, whatever this machine's CPU is."""
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda *_: native_bf16)
    assert model_mod.resolve_dtype("auto", CPU) is torch.float32  # the weights stay fp32 either way
    state = precision.resolve_state_dtype("auto", CPU, torch.float32, strategy="auto", mask_ignoring=False)
    assert state is (torch.bfloat16 if native_bf16 else None)
    # where mixed precision cannot run, auto keeps fp32 instead of refusing
    for strategy, ignoring in (("packed", False), ("auto", True)):
        assert (
            precision.resolve_state_dtype("auto", CPU, torch.float32, strategy=strategy, mask_ignoring=ignoring) is None
        )
    assert precision.resolve_state_dtype("auto", CPU, torch.bfloat16, strategy="auto", mask_ignoring=False) is None
    assert precision.resolve_state_dtype("float32", CPU, torch.float32, strategy="auto", mask_ignoring=False) is None
    # asked for, half precision is honoured on CPU
    assert model_mod.resolve_dtype("bfloat16", CPU) is torch.bfloat16
    assert model_mod.resolve_dtype("fp16", CPU) is torch.float16


def test_mixed_asked_for_where_it_cannot_run_is_refused():
    assert model_mod.resolve_dtype("mixed", CPU) is torch.float32
    assert precision.resolve_state_dtype("mixed", CPU, torch.float32, strategy="auto", mask_ignoring=False) is (
        torch.bfloat16
    )
    with pytest.raises(ConfigurationError, match="strategy packed"):
        precision.resolve_state_dtype("mixed", CPU, torch.float32, strategy="packed", mask_ignoring=False)
    with pytest.raises(ConfigurationError, match="attention layers"):
        precision.resolve_state_dtype("mixed", CPU, torch.float32, strategy="auto", mask_ignoring=True)
    with pytest.raises(ConfigurationError, match="unknown dtype 'half'"):
        model_mod.resolve_dtype("half", CPU)


def test_cpu_bf16_probe_reads_the_flags(tmp_path):
    for flags, native in ((BF16_CPUINFO, True), (AVX2_CPUINFO, False)):
        cpuinfo = tmp_path / f"cpuinfo-{native}"
        cpuinfo.write_text(flags)
        assert precision.cpu_has_native_bf16(cpuinfo) is native
    assert precision.cpu_has_native_bf16(tmp_path / "missing") is False
    # torch's own probe agrees with the flags the kernel reports on this machine
    assert precision.cpu_has_native_bf16() is precision.cpu_has_native_bf16(Path("/proc/cpuinfo"))


def test_default_judge_with_no_arguments_is_mixed_or_float32_on_cpu(default_judge):
    described = default_judge.describe()
    if not described["device"].startswith("cpu"):
        pytest.skip("the default judge runs on a GPU here; CUDA keeps bf16 by default")
    assert described["dtype"] == "float32"
    native = precision.cpu_has_native_bf16()
    assert described["cpu_native_bf16"] is native
    assert described["precision"] == ("mixed" if native else "float32")
    assert described["state_dtype"] == ("bfloat16" if native else "float32")
    assert default_judge.engine.self_check() <= tolerance_for(torch.float32) == 1e-4


def _isolation(engine: Engine, strategy: str = "packed") -> dict[str, float]:
    def probs(questions, strategy=strategy):
        plan = engine.plan(EngineRequest(STATE, tuple(questions)))
        return [a.probabilities for a in engine.run_plans([plan], strategy)[0].answers]

    full = probs(QUESTIONS)
    short = EngineRequest("A short note: the lamp is fine.", QUESTIONS[2:])
    together = engine.run_plans([engine.plan(short), engine.plan(EngineRequest(STATE, QUESTIONS))], strategy)[0]
    alone = engine.run_plans([engine.plan(short)], strategy)[0]
    return {
        "packed vs separate": max_diff(full, probs(QUESTIONS, "separate")),
        "reorder": max_diff(full, probs(QUESTIONS[::-1])[::-1]),
        "duplicate": max_diff(*([p] for p in probs((QUESTIONS[1], QUESTIONS[1])))),
        "batch": max_diff([a.probabilities for a in together.answers], [a.probabilities for a in alone.answers]),
    }


@pytest.fixture(scope="module")
def bf16_engine():
    return Engine.load(None, device="cpu", dtype="bfloat16", strategy="packed", self_check=False)


# Max |dp| of the packed strategy in bf16 on the default model, measured by
# benchmarks/checks/dtype_parity.py (benchmarks/results/dtype-parity-cpu.md): 0.027 packed vs separate,
# 0.034 reorder, 0.008 duplicate, 0.003 batch on an AVX2 CPU (bf16 emulated); the issue's
# AVX-512-BF16 machine measured 0.026, 0.014, 0.014 and 0.005. The bound leaves ~1.2x room.
BF16_PACKED_BOUND = 0.04


def test_bf16_isolation_is_within_its_measured_bound(bf16_engine, default_engine_fp32, default_engine_mixed):
    """bf16 on CPU moves answers (rounding over different shapes), by at most the measured bound;
    fp32 and mixed precision stay within 1e-4 on the same checks."""
    assert bf16_engine.lm.dtype is torch.bfloat16
    got = _isolation(bf16_engine)
    assert max(got.values()) <= BF16_PACKED_BOUND, got
    assert max(got.values()) > 1e-4, got  # bf16 really is inexact: the reason auto is fp32 on CPU
    assert bf16_engine.self_check() <= TOLERANCES[torch.bfloat16] == 5e-2
    exact = _isolation(default_engine_fp32)
    assert default_engine_fp32.lm.dtype is torch.float32
    assert max(exact.values()) <= 1e-4, exact
    mixed = _isolation(default_engine_mixed, "prefix_packed")
    assert default_engine_mixed.precision == "mixed"
    assert max(mixed.values()) <= 1e-4, mixed
