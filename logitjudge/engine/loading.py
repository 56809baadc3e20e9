"""The one engine loader across backends: ``load_engine(model, config)``.

::

    engine = load_engine(None, EngineConfig())                   # transformers: Engine.load
    engine = load_engine(None, EngineConfig(backend="vllm"))     # vLLM: VllmEngine.load

``Judge.load`` calls this; vLLM is imported only when asked for. Every backend it returns is a
:class:`~logitjudge.engine.backend.Backend` (the return type makes mypy check each against it).
"""

from __future__ import annotations

from typing import Any

from logitjudge.engine.backend import Backend
from logitjudge.engine.config import EngineConfig
from logitjudge.engine.core import Engine

__all__ = ["load_engine"]


def load_engine(model: str | None = None, config: EngineConfig | None = None, **options: Any) -> Backend:
    """Load ``model`` on ``config.backend`` (options amend ``config`` as in :meth:`Engine.load`).

    Raises:
        UnsupportedModelError: the model, a strategy or the backend cannot be served (vLLM missing).
        EngineDeadError: the start-up self-check failed.
    """
    config = (config or EngineConfig()).with_options(**options)
    if config.backend == "vllm":
        from logitjudge.engine.vllm_engine import VllmEngine

        return VllmEngine.load(model, config)
    return Engine.load(model, config)
