"""Per-item progress of ``logitjudge evaluate``, moving inside an engine call too.

Items reach the engine in batches (``--batch-size``, one ``answer_many`` call each), and a batch
of long items can take minutes on a CPU. So the bar does not wait for a batch's results: while a
call runs, a judge that reports tokens (:class:`~logitjudge.rubrics.judgelike.ReportsTokens`,
which :class:`logitjudge.Judge` is: the engine counts the tokens each decoder layer processes)
moves the bar by the share of the call's planned tokens done (times the items in the call,
capped below the next whole item). When the results arrive the bar is set to the items written.
The postfix shows tokens per second.

Where the judge cannot report (the vLLM backend, a ``--judge-factory`` judge without
:class:`~logitjudge.rubrics.judgelike.ReportsTokens`), the bar moves as each batch's results
arrive. Through a server (``evaluate --server``) it moves per
item as each call's rows are written, and the tokens come from the items' ``usage``.

Where stderr is not a terminal (a log file, CI), the bar is redrawn (a carriage return, as on a
terminal) at most every :data:`LOG_INTERVAL_S` seconds, and its 100% state once, at the end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from logitjudge.rubrics.judgelike import ReportsTokens

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.engine.types import EngineRequest, EngineResult
    from logitjudge.errors import LogitJudgeError
    from logitjudge.rubrics.judgelike import JudgeLike

__all__ = ["ItemProgress"]

LOG_INTERVAL_S = 30.0
"""Seconds between redraws of the bar when stderr is not a terminal."""

_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total_fmt} items [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


class ItemProgress:
    """A tqdm bar over items, and :meth:`wrap` to make a judge report progress inside its calls.

    Args:
        total: items in the file; ``initial``: items already done (a resumed run).
        pending: items this run sends; ``batch_size``: items per engine call.
        disable: no bar (``--no-progress``).
    """

    def __init__(self, total: int, initial: int, pending: int, batch_size: int, disable: bool = False) -> None:
        from tqdm import tqdm

        isatty = getattr(sys.stderr, "isatty", None)
        self.terminal = terminal = bool(isatty and isatty())
        self.bar = tqdm(
            total=total,
            initial=initial,
            unit="item",
            dynamic_ncols=True,
            disable=disable,
            desc="evaluate",
            file=sys.stderr,
            bar_format=_BAR_FORMAT,
            mininterval=0.1 if terminal else LOG_INTERVAL_S,
            maxinterval=10.0 if terminal else LOG_INTERVAL_S,
        )
        self.initial = initial
        self.pending = pending
        self.batch_size = batch_size
        self.written = 0
        self.engine_done = 0  # items whose engine call returned
        self.tokens = 0.0
        self.started = time.monotonic()

    # -- the bar -------------------------------------------------------------------------------

    def _show(self, done: float) -> None:
        target = self.initial + done
        if target > self.bar.n:
            if self.terminal or target < self.bar.total:
                self.bar.update(target - self.bar.n)
            else:  # a log: the 100% state is written once, by close()
                self.bar.n = target
                self.bar.miniters = 0  # and not by tqdm's monitor thread before that
        elapsed = time.monotonic() - self.started
        if self.tokens and elapsed > 0:
            self.bar.set_postfix_str(f"{self.tokens / elapsed:,.0f} tok/s", refresh=False)

    def item_written(self, tokens: float = 0.0) -> None:
        """One item's results are written; ``tokens``: input tokens its answer took that no hook
        counted (an item answered by a server: its ``usage``), for the tokens-per-second postfix."""
        self.written += 1
        self.tokens += tokens
        self._show(max(self.written, self.engine_done))

    def close(self) -> None:
        self.bar.close()

    # -- inside engine calls -----------------------------------------------------------------------

    def wrap(self, judge: JudgeLike) -> JudgeLike:
        """``judge`` with an ``answer_many`` that advances the bar while it runs (the rest forwarded)."""
        if self.bar.disable:
            return judge
        return _ProgressJudge(judge, self)

    def call(self, judge: JudgeLike, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        in_flight = max(1, min(self.batch_size, self.pending - self.engine_done))
        base = max(self.written, self.engine_done)
        planned, seen = [0], [0]

        def on_tokens(tokens: int) -> None:
            seen[0] += tokens
            self.tokens += tokens
            if planned[0]:
                self._show(base + min(0.95, seen[0] / planned[0]) * in_flight)

        reporter = judge if isinstance(judge, ReportsTokens) else None
        counting = reporter.counting_tokens(on_tokens) if reporter is not None else nullcontext(False)
        try:
            with counting as live:
                if live and reporter is not None:  # planned only where tokens will be reported
                    planned[0] = reporter.planned_tokens(requests)
                return judge.answer_many(requests)
        finally:
            self.engine_done = min(self.pending, base + in_flight)
            self._show(self.engine_done)


class _ProgressJudge:
    """A :class:`~logitjudge.rubrics.judgelike.JudgeLike` forwarding to the judge; ``answer_many``
    reports progress to an :class:`ItemProgress`."""

    def __init__(self, judge: JudgeLike, progress: ItemProgress) -> None:
        self._judge = judge
        self._progress = progress

    @property
    def model_name(self) -> str:
        return self._judge.model_name

    @property
    def default_rotations(self) -> int:
        return self._judge.default_rotations

    @property
    def evaluator_scalings(self) -> Mapping[str, Scaling]:
        return self._judge.evaluator_scalings

    def check_model(self, requested: str) -> None:
        self._judge.check_model(requested)

    def answer_many(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        return self._progress.call(self._judge, requests)

    def describe(self) -> dict[str, Any]:
        return self._judge.describe()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._judge, name)
