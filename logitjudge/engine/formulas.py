"""The probability formulas: softmax, log-sum-exp, the calibration's scaling, the sigmoid.

::

    from logitjudge.engine.formulas import scale, sigmoid, softmax

    softmax(torch.tensor([2.0, 0.5]))          # tensor([0.8176, 0.1824])
    scale([0.7, 0.3], temperature=2.0)         # softmax(log p / 2): tensor([0.6044, 0.3956], dtype=torch.float64)
    sigmoid(0.0)                               # 0.5

These are the package's only softmax / log-sum-exp / exp-based formulas (``tests/engine/test_one_place.py``
scans for another): the readout (:mod:`logitjudge.engine.readout`) computes every answer's
probabilities with them, the calibration (:mod:`logitjudge.engine.calibration`) fits and applies
:func:`scale` with them, the trained heads and the rubrics' scores call them. Both the readout and
the calibration import this module, and it imports nothing of ours, so neither imports the other
to reach a formula.

torch is imported on the first call of a tensor formula, not with this module: the calibration
(which the CLI imports to build its flags) and the rubrics (which the server imports) load none.
:func:`sigmoid` is plain Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["PROBABILITY_FLOOR", "softmax", "logsumexp", "scale", "sigmoid"]

PROBABILITY_FLOOR = 1e-9
"""Floor of probabilities before a log (calibration, its fit and NLL): an fp32 softmax can
underflow to 0, whose log would be -inf."""


def softmax(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``exp(z_i) / sum_j exp(z_j)`` along ``dim``, in ``z``'s dtype (``torch.softmax``: max-shifted,
    so large scores do not overflow)."""
    import torch

    return torch.softmax(z, dim=dim)


def logsumexp(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``log sum_j exp(z_j)`` along ``dim`` (which is removed), in ``z``'s dtype
    (``torch.logsumexp``: max-shifted, stable)."""
    import torch

    return torch.logsumexp(z, dim=dim)


def scale(
    probs: torch.Tensor | Sequence[float] | Sequence[Sequence[float]],
    temperature: float,
    bias: Sequence[float] | None = None,
) -> torch.Tensor:
    """Temperature (and bias) scaling of distributions: ``softmax(log max(p, 1e-9) / T + b)``.

    Source: Guo et al. 2017 (see :mod:`logitjudge.engine.calibration`, which fits ``T`` and ``b``).

    Args:
        probs: (n,) one distribution, or (N, n) several with the same options; computed in fp64.
        temperature: ``T`` > 0.
        bias: ``b``, one term per option, or ``None``.

    Returns:
        fp64 probabilities of ``probs``' shape, each row summing to 1 (a row of a batch equals
        that row scaled alone, bit for bit).

    Raises:
        ValueError: ``bias`` has another length than the rows of ``probs``.
    """
    import torch

    p = torch.as_tensor(probs, dtype=torch.float64)  # (..., n)
    z = p.clamp(PROBABILITY_FLOOR, 1.0).log() / temperature  # (..., n)
    if bias is not None:
        if len(bias) != z.shape[-1]:
            raise ValueError(f"bias has {len(bias)} terms for {z.shape[-1]} options")
        z = z + torch.tensor(bias, dtype=torch.float64)  # (n,) broadcast over rows
    return softmax(z, dim=-1)


def sigmoid(z: float) -> float:
    """``1 / (1 + exp(-z))``: the logistic function of a log-odds ``z``, in float64, for any
    finite ``z`` (never overflows: ``exp`` is only taken of ``-|z|``). Equals the first entry
    of ``softmax((z, 0))`` within float rounding."""
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)
