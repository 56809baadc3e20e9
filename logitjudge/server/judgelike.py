"""What the server needs of a judge: :class:`ServedJudge`, the rubrics'
:class:`~logitjudge.rubrics.judgelike.JudgeLike` plus the System One wire.

::

    from logitjudge.server.judgelike import ServedJudge

    def create_app(judge: ServedJudge, ...) -> FastAPI: ...   # a logitjudge.Judge (any engine)

The evaluate route uses only the ``JudgeLike`` members (``check_model``, ``default_rotations``,
``evaluator_scalings``, ``describe``, ``model_name``; its items reach the engine through the
app's scheduler, which calls ``answer_many``); ``POST /v1/systemone`` converts the wire with
``to_engine`` and ``to_response``; ``/metrics`` reads ``counters``. :class:`logitjudge.Judge`
satisfies it, over any :class:`~logitjudge.engine.backend.Backend`; a stand-in judge (a test's
wrapper) subclasses ``Judge`` or declares every member. ``isinstance(obj, ServedJudge)`` checks
that the members exist (not their signatures).

This module imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from logitjudge.rubrics.judgelike import JudgeLike

if TYPE_CHECKING:
    from logitjudge.contract import systemone as schemas
    from logitjudge.engine.types import EngineRequest, EngineResult

__all__ = ["ServedJudge"]


@runtime_checkable
class ServedJudge(JudgeLike, Protocol):
    """A loaded judge as the server uses it (see :class:`logitjudge.Judge`)."""

    def to_engine(self, req: schemas.SystemOneRequest) -> EngineRequest:
        """A validated ``POST /v1/systemone`` body -> one engine request (the judge's rotations
        where a question does not say)."""
        ...

    def to_response(self, req: schemas.SystemOneRequest, result: EngineResult) -> schemas.SystemOneResponse:
        """The engine's result -> the wire response, keyed by the request's question ids."""
        ...

    def counters(self) -> dict[str, Any]:
        """The engine's cumulative counters, plain numbers (``/metrics``)."""
        ...
