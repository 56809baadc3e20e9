"""Per-item progress of ``logitjudge evaluate``, moving inside an engine call too.

Items reach the engine in batches (``--batch-size``, one ``answer_many`` call each), and a batch
of long items can take minutes on a CPU. So the bar does not wait for a batch's results: while a
call runs, forward hooks on the model's decoder layers count the tokens processed, and the bar
advances by the share of the call's planned tokens done (times the items in the call, capped
below the next whole item). When the results arrive the bar is set to the items written. The
postfix shows tokens per second.

Where no hooks can be set (the vLLM backend, a ``--judge-factory`` judge without a torch model),
the bar moves as each batch's results arrive. Through a server (``evaluate --server``) it moves per
item as each call's rows are written, and the tokens come from the items' ``usage``.

Where stderr is not a terminal (a log file, CI), the bar is redrawn (a carriage return, as on a
terminal) at most every :data:`LOG_INTERVAL_S` seconds, and its 100% state once, at the end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Scaling
    from logitjudge.engine.types import EngineRequest, EngineResult
    from logitjudge.errors import LogitJudgeError
    from logitjudge.rubrics.judgelike import JudgeLike

__all__ = ["ItemProgress"]

LOG_INTERVAL_S = 30.0
"""Seconds between redraws of the bar when stderr is not a terminal."""

_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total_fmt} items [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


def _decoder_layers(model: Any) -> list[Any]:
    """The decoder layers of a transformers causal LM (``model.model.layers`` and kin), else ``[model]``."""
    for path in ("model.layers", "model.decoder.layers", "transformer.h", "gpt_neox.layers", "layers"):
        obj = model
        for attr in path.split("."):
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if obj is not None and hasattr(obj, "__len__") and len(obj) > 0:
            return list(obj)
    return [model] if hasattr(model, "register_forward_hook") else []


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
        planned = _planned_tokens(judge, requests)
        layers = _decoder_layers(getattr(getattr(getattr(judge, "engine", None), "lm", None), "model", None))
        seen = [0.0]

        def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], _out: Any) -> None:
            hidden = args[0] if args else kwargs.get("hidden_states")
            shape = getattr(hidden, "shape", None)
            if shape is None or len(shape) < 2:
                return
            tokens = float(shape[0] * shape[1]) / len(layers)
            seen[0] += tokens
            self.tokens += tokens
            if planned:
                self._show(base + min(0.95, seen[0] / planned) * in_flight)

        handles = []
        if planned:
            for layer in layers:
                try:
                    handles.append(layer.register_forward_hook(hook, with_kwargs=True))
                except (AttributeError, TypeError):
                    break
        try:
            return judge.answer_many(requests)
        finally:
            for h in handles:
                h.remove()
            self.engine_done = min(self.pending, base + in_flight)
            self._show(self.engine_done)


def _planned_tokens(judge: JudgeLike, requests: Sequence[EngineRequest]) -> int:
    """Tokens the engine plans for ``requests`` (0 when it cannot tell: the bar then moves per call).

    A :class:`logitjudge.Judge` over the transformers engine can tell (``judge.engine.plan``); the
    engine is no part of :class:`~logitjudge.rubrics.judgelike.JudgeLike`, hence the probes here
    and in :meth:`ItemProgress.call`."""
    plan = getattr(getattr(judge, "engine", None), "plan", None)
    if plan is None:
        return 0
    total = 0
    for req in requests:
        try:
            total += plan(req).n_tokens
        except Exception:  # the request's own error comes back from answer_many
            continue
    return total


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
