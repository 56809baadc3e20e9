"""Mixed precision: the state's forward in bf16, the questions and the readout in fp32.

The state (the shared prefix: system prompt, state text) is most of a request's tokens; every
question branches off it and reads only its KV cache. Running that one forward in bf16 (CPU
autocast over the fp32 weights, no second copy of the weights) and then upcasting its KV cache
to fp32 keeps the questions' own forwards and the readout in fp32. The only bf16 rounding is in
the state's keys and values, which every question of the request sees identically, whatever the
strategy, so isolation keeps its fp32 bound: a question's answer in the packed pass equals its
separate pass within 1e-4 (``tests/engine/test_parity.py``, ``tests/engine/test_dtype.py``). What
the mode moves is the answer against an all-fp32 run (at most 5.2e-3 on the default model:
``benchmarks/results/cpu-precision-qwen2.5-coder-1.5b-instruct.md``).

Modes (``EngineConfig.dtype``, ``--dtype``):

- ``mixed``: weights in fp32, the state in bf16, questions in fp32. Needs a strategy that runs the
  state in its own forward (``prefix_packed``, ``prefix_rows``, ``separate``; ``auto`` keeps to
  them) and attention layers (a recurrent state cannot be upcast after the fact).
- ``auto`` on a CPU with native bf16 (AVX512-BF16 or AMX, as torch reports it): ``mixed``
  where it applies (fp32 weights, attention layers, strategy not ``packed``), else fp32.
- ``float32``: every forward in fp32 (the bit-stable reference).

How to run it: ``logitjudge ask --dtype mixed ...``; ``describe()["precision"]`` names the mode.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from logitjudge.errors import ConfigurationError

__all__ = ["MIXED", "cpu_has_native_bf16", "resolve_state_dtype", "state_autocast", "upcast_cache"]

MIXED = "mixed"
"""The ``dtype`` value for mixed precision (the state in bf16, questions in fp32)."""


def cpu_has_native_bf16(cpuinfo: Path | None = None) -> bool:
    """True when the CPU computes bf16 natively (AVX512-BF16 or AMX tiles).

    Args:
        cpuinfo: a ``/proc/cpuinfo``-style file to read the flags from; ``None``: ask torch
            (``torch.cpu._is_avx512_bf16_supported`` / ``_is_amx_tile_supported``, read from
            cpuinfo by torch's own CPU detection), falling back to ``/proc/cpuinfo``.

    A CPU with AVX-512 but no bf16 instructions emulates bf16 in oneDNN, slower than fp32 there,
    so it does not count.
    """
    if cpuinfo is None:
        probe = getattr(torch, "cpu", None)
        avx512_bf16 = getattr(probe, "_is_avx512_bf16_supported", None)
        amx = getattr(probe, "_is_amx_tile_supported", None)
        if avx512_bf16 is not None and amx is not None:
            return bool(avx512_bf16() or amx())
        cpuinfo = Path("/proc/cpuinfo")
    try:
        flags = cpuinfo.read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_state_dtype(
    dtype: str, device: torch.device, weights: torch.dtype, *, strategy: str, mask_ignoring: bool
) -> torch.dtype | None:
    """The dtype of the state's forward when it differs from the weights', else ``None``.

    Args:
        dtype: the configured ``dtype`` (``auto``, ``mixed``, ``float32``, ...).
        device: where the model runs.
        weights: the loaded weights' dtype.
        strategy: the configured strategy (``packed`` runs state and questions in one forward).
        mask_ignoring: the model has recurrent/SSM layers (their state cannot be upcast).

    Returns:
        ``torch.bfloat16`` for ``mixed``, and for ``auto`` on a CPU with native bf16 where mixed
        precision applies (fp32 weights, attention layers, strategy not ``packed``); else ``None``.

    Raises:
        ConfigurationError: ``mixed`` with weights other than fp32, a recurrent model, the
            ``packed`` strategy, or on a GPU without bf16.
    """
    if dtype == MIXED:
        if weights != torch.float32:
            raise ConfigurationError(f"dtype mixed runs fp32 weights, got {weights}", field=("dtype",))
        if mask_ignoring:
            raise ConfigurationError(
                "dtype mixed needs attention layers: this model's recurrent state cannot be upcast; use float32",
                field=("dtype",),
            )
        if strategy == "packed":
            raise ConfigurationError(
                "dtype mixed runs the state in its own forward; strategy packed runs it with the questions: "
                "use auto, prefix_packed, prefix_rows or separate",
                field=("dtype",),
            )
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigurationError(
                "dtype mixed needs bf16, which this GPU lacks; use float32 or float16", field=("dtype",)
            )
        return torch.bfloat16
    if dtype != "auto" or device.type != "cpu" or weights != torch.float32:
        return None
    if mask_ignoring or strategy == "packed" or not cpu_has_native_bf16():
        return None
    return torch.bfloat16


@contextlib.contextmanager
def state_autocast(device: torch.device, state_dtype: torch.dtype | None) -> Iterator[None]:
    """Run the enclosed forward with its matrix products in ``state_dtype`` (torch autocast
    over the weights as loaded: no copy is kept); a no-op when ``state_dtype`` is ``None``."""
    if state_dtype is None:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=state_dtype):
        yield


def upcast_cache(cache: Any, dtype: torch.dtype) -> Any:
    """Cast every layer's keys and values in ``cache`` (a transformers ``Cache``) to ``dtype``,
    in place; return it. Under autocast the keys come out fp32 (rotary embeddings promote them)
    and the values bf16; both are stored in ``dtype`` so the questions' forwards run in it.

    Raises:
        ConfigurationError: the cache has no key/value layers (e.g. a recurrent state).
    """
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise ConfigurationError(
            f"cannot upcast a {type(cache).__name__}: mixed precision needs a KV cache", field=("dtype",)
        )
    for layer in layers:
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor) and t.dtype != dtype:
                setattr(layer, name, t.to(dtype))
    return cache
