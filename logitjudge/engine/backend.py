"""What a judge needs of an engine: :class:`Backend`, the interface every backend implements.

::

    from logitjudge.engine.backend import Backend

    engine: Backend = load_engine(None, config)      # transformers (Engine) or vLLM (VllmEngine)
    engine.run_batch([EngineRequest(state, questions)])  -> [EngineResult | LogitJudgeError]

The two engines of the package implement it: :class:`~logitjudge.engine.core.Engine` (our runner
on a transformers model) and :class:`~logitjudge.engine.vllm_engine.VllmEngine` (vLLM's forward
passes); :func:`~logitjudge.engine.loading.load_engine` returns either as a ``Backend``, so mypy
checks both against it. The members are the calls :class:`logitjudge.Judge` makes (and through it
the server, the rubrics and the CLI): nothing else of an engine is reached from outside
``logitjudge.engine``.

A third backend (llama.cpp, SGLang, a remote model) has two ways in:

- subclass :class:`~logitjudge.engine.core.Engine` and override its forward stage
  (:meth:`~logitjudge.engine.core.Engine.read`: label log-probs for planned requests) plus
  ``load``, ``describe``, ``self_check``, ``counters`` and ``close``, as ``VllmEngine`` does: the
  prompt, the plan (token ids, the 413 budgets), the readout, calibration and the answers stay
  the package's, so answers keep their meaning;
- or implement this protocol from scratch (a stand-in engine for tests does:
  ``tests/support/scripted.py``), answering the typed requests itself.

Then add its name to :data:`~logitjudge.engine.config.BACKENDS` and a branch to ``load_engine``.

This module imports no torch: the server names the type without loading a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Calibration
    from logitjudge.engine.heads import Head
    from logitjudge.engine.types import EngineRequest, EngineResult
    from logitjudge.errors import LogitJudgeError

__all__ = ["Backend"]


class Backend(Protocol):
    """A loaded model that answers typed requests (see the module docstring)."""

    @property
    def name(self) -> str:
        """The served model's name (responses report it as ``model``)."""
        ...

    @property
    def calibration(self) -> Calibration | None:
        """The calibration applied to every answer (``None``: raw distributions)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Model, backend, device, dtype, strategy, prompt version, fingerprint, calibration,
        heads and limits: plain values, what ``/healthz`` and result files record. ``model``,
        ``fingerprint``, ``prompt_version`` and ``dtype`` bind calibrations and heads to it."""
        ...

    def run_batch(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        """Answer several requests in shared forward passes: one result per request, in order, or
        the :class:`~logitjudge.errors.RequestError` that request alone raised (413 over budget,
        422 a malformed question), so one bad request does not fail its neighbours.

        Raises:
            EngineError: the engine failed the whole batch (``OverloadedError`` out of memory,
                ``EngineDeadError``).
        """
        ...

    def planned_tokens(self, requests: Sequence[EngineRequest]) -> int:
        """Tokens the forward passes of ``requests`` will hold (0: this backend cannot tell);
        a request that would fail counts 0."""
        ...

    def counting_tokens(self, callback: Callable[[int], None]) -> AbstractContextManager[bool]:
        """A context in which ``callback(tokens)`` is called as forward passes progress (the
        tokens processed since the last call); it yields whether this backend reports at all
        (False: ``callback`` is never called, as on vLLM)."""
        ...

    def set_calibration(self, calibration: Calibration | None) -> None:
        """Apply ``calibration`` to every answer from now on (``None`` removes it).

        Raises:
            CalibrationMismatchError: it was fitted for another engine.
        """
        ...

    def set_heads(self, heads: dict[str, Head] | None) -> None:
        """Load trained heads for the questions that name one (``None`` or ``{}`` removes them).

        Raises:
            HeadMismatchError: a head was trained for another engine.
            UnsupportedModelError: this backend cannot read heads (vLLM returns no hidden
                states), or a head reads a layer the model lacks.
        """
        ...

    def load_adapters(self, folders: Sequence[Any]) -> None:
        """Read branch adapter folders (:mod:`logitjudge.engine.adapters`) and install them for
        the questions that name one (replacing any installed before).

        Raises:
            AdapterError: a folder is malformed, a plain LoRA, or for other weights.
            UnsupportedModelError: this backend runs no adapters (vLLM has no activated LoRA).
        """
        ...

    def counters(self) -> dict[str, Any]:
        """Cumulative counters for ``/metrics``, plain numbers (``paths``: forwards per runner
        path; ``state_cache``: the state cache's statistics or ``None``; backends may add keys)."""
        ...

    def close(self) -> None:
        """Release what the backend holds (vLLM's engine processes, the state cache's KV)."""
        ...
