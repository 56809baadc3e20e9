"""What the rubrics and the CLI need of a judge: :class:`JudgeLike`.

::

    from logitjudge.rubrics.judgelike import JudgeLike

    def run(judge: JudgeLike) -> None: ...     # a logitjudge.Judge, or any object with these members

:class:`logitjudge.Judge` satisfies it (so does a ``Judge`` over the tests' scripted engine, and
the CLI's progress wrapper); a ``--judge-factory`` callable must return one. The rubric runner
reads every member directly: a stand-in judge declares them all (``check_model`` that accepts
every name, ``default_rotations = 1``, ``evaluator_scalings = {}`` where it has none).
``isinstance(obj, JudgeLike)`` checks that the members exist (not their signatures).

:class:`ReportsTokens` is optional: a judge with it (``logitjudge.Judge`` has it) lets
``logitjudge evaluate``'s bar move inside a long engine call, by the tokens its forward passes
have processed; without it the bar moves as calls return.

This module imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.engine.types import EngineRequest, EngineResult
    from logitjudge.errors import LogitJudgeError

__all__ = ["JudgeLike", "ReportsTokens"]


@runtime_checkable
class JudgeLike(Protocol):
    """A loaded judge as :mod:`logitjudge.rubrics` and the CLI use it (see :class:`logitjudge.Judge`)."""

    @property
    def model_name(self) -> str:
        """The served model's name (what results report in ``model``)."""
        ...

    @property
    def default_rotations(self) -> int:
        """Option-order rotations for choice/score questions when a request does not say (1 = off)."""
        ...

    @property
    def evaluator_scalings(self) -> Mapping[str, Scaling]:
        """``"<evaluator>@<version>"`` -> the calibration's scaling of its 0..1 score (empty: none)."""
        ...

    def check_model(self, requested: str) -> None:
        """Raise ``UnknownModelError`` unless ``requested`` names this judge (its name or an alias)."""
        ...

    def answer_many(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        """One engine result (or that request's own error) per request, in order."""
        ...

    def describe(self) -> dict[str, Any]:
        """Model, device, dtype, strategy and limits (what result files record as the engine)."""
        ...


@runtime_checkable
class ReportsTokens(Protocol):
    """A judge that reports the tokens its forward passes process (see :class:`logitjudge.Judge`)."""

    def planned_tokens(self, requests: Sequence[EngineRequest]) -> int:
        """Tokens the forward passes of ``requests`` will hold (0: cannot tell)."""
        ...

    def counting_tokens(self, callback: Callable[[int], None]) -> AbstractContextManager[bool]:
        """A context in which ``callback(tokens)`` is called as forward passes progress; it yields
        whether it reports at all."""
        ...
