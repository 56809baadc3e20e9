"""An asyncio scheduler in front of the blocking engine: many callers, few shared forward passes.

Callers ``await scheduler.submit(request)`` from the event loop. Requests wait in a bounded FIFO
queue; one worker takes as many as fit under a token budget (and a request count) and hands them
to ``run_batch`` in a dedicated engine thread, so the event loop keeps accepting connections while
the model runs. With ``max_concurrent_batches`` > 1 (the vLLM backend, which batches continuously
itself) up to that many batches run at once, each in its own thread: a request that arrives while
others run is handed to the engine at once instead of waiting for them. Each request keeps its
own blocks inside the shared pass (the engine's job), so a request answered in a batch equals the
same request answered alone.

::

    scheduler = Scheduler(judge.run_batch, max_queue=256, max_num_batched_tokens=4096)   # defaults: SchedulerConfig
    result = await scheduler.submit(engine_request)   # EngineResult, or raises LogitJudgeError
    await scheduler.close()                           # drain: finish what was accepted, then stop

Rules:
- **Bounded queue.** With ``max_queue`` requests already waiting, ``submit`` raises
  :class:`~logitjudge.errors.OverloadedError` at once (the server answers 529 + ``Retry-After``);
  it never blocks the caller on a full queue.
- **Cancellation frees the place.** A caller that goes away (its task is cancelled, e.g. the HTTP
  client disconnected) leaves the queue at once; a request already in a running batch is finished
  and its result dropped.
- **Token budget.** A batch holds requests in arrival order while their estimated tokens fit in
  ``max_num_batched_tokens``; the first request always runs, even when it alone is over the budget (the
  engine's own limits decide whether it can be answered). No request overtakes another.
- **Per-request errors.** ``run_batch`` returns, per request, a result or the error that request
  alone raised. If it raises for the whole batch, each request is retried alone so one bad request
  cannot fail its neighbours.
- **Out of memory.** A batch that runs out of memory (``torch.OutOfMemoryError``, ``MemoryError``,
  or a ``RuntimeError`` saying "out of memory") is split in halves and each half retried, down to
  single requests; a request that still runs out of memory alone gets
  :class:`~logitjudge.errors.OverloadedError` (529 + ``Retry-After``: retryable, memory may be
  free later), never a crash and never a failed neighbour.
- **Drain.** ``close()`` refuses new requests (``OverloadedError``), answers every accepted one,
  then stops the worker.

This module imports no torch and no HTTP framework.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from logitjudge.engine.config import SchedulerConfig
from logitjudge.engine.question_types import QUESTION_TYPES
from logitjudge.engine.types import EngineRequest, EngineResult, Text
from logitjudge.errors import EngineError, LogitJudgeError, OverloadedError

__all__ = ["Scheduler", "SchedulerObserver", "estimate_tokens", "is_out_of_memory"]

logger = logging.getLogger("logitjudge.scheduler")

RunBatch = Callable[[Sequence[EngineRequest]], Sequence["EngineResult | LogitJudgeError"]]
CountTokens = Callable[[EngineRequest], int]

# Prompt-template overhead in characters (system text and chat markup per request; instructions
# header, label list and answer cue per question). Fitted on the default model's template
# (lj-prompt-1): a 3-question support ticket is 185 real tokens, estimated 184.
_REQUEST_OVERHEAD_CHARS = 96
_QUESTION_OVERHEAD_CHARS = 112
_OPTION_OVERHEAD_CHARS = 8


def _text_chars(text: Text | None) -> int:
    if text is None:
        return 0
    if isinstance(text, str):
        return len(text)
    return len(json.dumps(text, ensure_ascii=False, separators=(",", ":"), default=str))


def estimate_tokens(request: EngineRequest) -> int:
    """A cheap token estimate of one request: characters / 4 (no tokenizer call).

    Used only to form batches under a budget; usage and the 413 limits come from the engine's real
    tokenizer count. About right for English text under BPE tokenizers (~4 chars per token).
    """
    chars = _REQUEST_OVERHEAD_CHARS + _text_chars(request.state)
    for q in request.questions:
        stem = _QUESTION_OVERHEAD_CHARS + _text_chars(q.instructions)
        options = sum(_OPTION_OVERHEAD_CHARS + len(opt.name) + _text_chars(opt.description) for opt in q.options)
        spec = QUESTION_TYPES.get(q.type)  # an unknown type is the engine's to refuse, with its index
        views = spec.n_views(q) if spec is not None else 1
        # a rotated question's views share their stem (the question line, run once: the packer's
        # QuestionPlan.stem); each view lists the options in its own order
        chars += stem + options * views
    return chars // 4 + 1


class SchedulerObserver(Protocol):
    """What the scheduler reports (the server turns it into Prometheus metrics)."""

    def queue_depth(self, waiting: int) -> None:
        """The number of requests waiting (not counting the running batch) changed."""

    def batch_done(self, size: int, tokens: int, seconds: float, waits: Sequence[float]) -> None:
        """A batch of ``size`` requests (``tokens`` estimated) ran for ``seconds``; ``waits`` are the
        seconds each of its requests spent in the queue."""

    def rejected(self, reason: str) -> None:
        """A request was refused without running (``"queue_full"`` or ``"shutting_down"``)."""


class _NullObserver:
    def queue_depth(self, waiting: int) -> None:
        pass

    def batch_done(self, size: int, tokens: int, seconds: float, waits: Sequence[float]) -> None:
        pass

    def rejected(self, reason: str) -> None:
        pass


@dataclass
class _Job:
    request: EngineRequest
    tokens: int
    future: asyncio.Future[EngineResult | LogitJudgeError]
    enqueued: float


class Scheduler:
    """Groups concurrent requests into ``run_batch`` calls, one batch at a time.

    Args:
        run_batch: the blocking engine call (``Judge.run_batch``); one result or error per request,
            in order. With ``max_concurrent_batches=1`` always called from one worker thread, never
            concurrently; with more, from up to that many threads at once (it must be thread-safe).
        count_tokens: estimated tokens of a request, for the batch budget (default
            :func:`estimate_tokens`). Runs on the event loop: keep it cheap.
        max_queue, max_num_batched_tokens, max_batch_requests, max_concurrent_batches: see
            :class:`~logitjudge.engine.config.SchedulerConfig` (defaults and ranges; out of range
            raises ``ValueError``).
        observer: receives queue depth and batch statistics (metrics).
    """

    def __init__(
        self,
        run_batch: RunBatch,
        *,
        count_tokens: CountTokens = estimate_tokens,
        max_queue: int = SchedulerConfig.max_queue,
        max_num_batched_tokens: int = SchedulerConfig.max_num_batched_tokens,
        max_batch_requests: int = SchedulerConfig.max_batch_requests,
        max_concurrent_batches: int = SchedulerConfig.max_concurrent_batches,
        observer: SchedulerObserver | None = None,
    ) -> None:
        SchedulerConfig(
            max_queue, max_num_batched_tokens, max_batch_requests, max_concurrent_batches
        )  # raises when out of range
        self.max_concurrent_batches = max_concurrent_batches
        self._run_batch = run_batch
        self._count_tokens = count_tokens
        self.max_queue = max_queue
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_batch_requests = max_batch_requests
        self._observer: SchedulerObserver = observer or _NullObserver()
        self._pending: collections.deque[_Job] = collections.deque()
        self._in_flight = 0
        self._running: set[asyncio.Task[None]] = set()  # batches in the engine now
        self._calls: set[Future[list[EngineResult | LogitJudgeError]]] = set()  # their threads' work
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        # Moving averages for the Retry-After hint; seeded so the first hint is about 1 s.
        self._avg_batch_seconds = 1.0
        self._avg_batch_size = 1.0

    # -- state -------------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """Requests in the queue (cancelled ones leave it at once)."""
        return len(self._pending)

    @property
    def in_flight(self) -> int:
        """Requests in the batches the engine is running now."""
        return self._in_flight

    @property
    def engine_calls_running(self) -> int:
        """Engine calls still running in their threads. After a drain that timed out these are
        abandoned: nothing waits for their answers, but a thread cannot be interrupted mid-forward,
        so a process that must stop now exits without them (``logitjudge serve`` does)."""
        return sum(not call.done() for call in list(self._calls))

    @property
    def closing(self) -> bool:
        """True once :meth:`close` was called: new requests are refused."""
        return self._closing

    def retry_after(self) -> float:
        """Seconds a refused caller should wait: the time to work through the queue (1..30 s)."""
        batches_ahead = len(self._pending) / max(1.0, self._avg_batch_size) + 1.0
        return float(min(30, max(1, math.ceil(batches_ahead * self._avg_batch_seconds))))

    # -- submitting --------------------------------------------------------------------------

    async def submit(self, request: EngineRequest) -> EngineResult:
        """Queue one request and wait for its answer.

        Raises:
            OverloadedError: the queue is full, or the scheduler is shutting down (retryable).
            LogitJudgeError: the error the engine returned for this request (e.g.
                :class:`~logitjudge.errors.ContextOverflowError`).
            asyncio.CancelledError: the caller was cancelled; its place in the queue is freed.
        """
        if self._closing:
            self._observer.rejected("shutting_down")
            raise OverloadedError("the server is shutting down", retry_after=self.retry_after())
        if len(self._pending) >= self.max_queue:
            self._observer.rejected("queue_full")
            raise OverloadedError(
                f"the queue is full ({self.max_queue} requests waiting); retry later",
                retry_after=self.retry_after(),
            )
        self._ensure_worker()
        assert self._loop is not None and self._wakeup is not None
        job = _Job(request, max(1, int(self._count_tokens(request))), self._loop.create_future(), time.monotonic())
        self._pending.append(job)
        self._observer.queue_depth(len(self._pending))
        self._wakeup.set()
        try:
            result = await job.future
        except asyncio.CancelledError:
            self._forget(job)
            raise
        if isinstance(result, LogitJudgeError):
            raise result
        return result

    def _forget(self, job: _Job) -> None:
        """Drop a cancelled job from the queue now, so its place is free for the next caller."""
        try:
            self._pending.remove(job)
        except ValueError:  # already taken into a batch (or drained)
            return
        self._observer.queue_depth(len(self._pending))

    def _ensure_worker(self) -> None:
        loop = asyncio.get_running_loop()
        if self._worker is not None and not self._worker.done() and self._loop is loop:
            return
        # First call, or a new event loop (e.g. a test client per test): start a fresh worker.
        self._loop = loop
        self._wakeup = asyncio.Event()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self.max_concurrent_batches, thread_name_prefix="logitjudge-engine"
            )
        self._worker = loop.create_task(self._work(), name="logitjudge-scheduler")

    # -- the worker --------------------------------------------------------------------------

    def _take_batch(self) -> list[_Job]:
        """Pop the next batch: arrival order, under the token budget, skipping cancelled jobs."""
        batch: list[_Job] = []
        tokens = 0
        while self._pending and len(batch) < self.max_batch_requests:
            job = self._pending[0]
            if job.future.done():  # cancelled by its caller while waiting
                self._pending.popleft()
                continue
            if batch and tokens + job.tokens > self.max_num_batched_tokens:
                break
            self._pending.popleft()
            batch.append(job)
            tokens += job.tokens
        self._observer.queue_depth(len(self._pending))
        return batch

    async def _work(self) -> None:
        assert self._loop is not None and self._wakeup is not None and self._executor is not None
        wakeup = self._wakeup
        try:
            while True:
                while (not self._pending or len(self._running) >= self.max_concurrent_batches) and not self._closing:
                    wakeup.clear()
                    await wakeup.wait()
                if self._closing and not self._pending:
                    break
                if len(self._running) >= self.max_concurrent_batches:  # closing, all slots busy
                    await asyncio.wait(set(self._running), return_when=asyncio.FIRST_COMPLETED)
                    continue
                batch = self._take_batch()
                if not batch:
                    continue
                task = self._loop.create_task(self._run_one(batch))
                self._running.add(task)
                task.add_done_callback(self._batch_finished)
            if self._running:  # drain: the batches already in the engine finish
                await asyncio.gather(*self._running)
        except BaseException:  # the worker itself was cancelled (a drain that timed out)
            for task in list(self._running):
                task.cancel()
            raise

    def _batch_finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._wakeup is not None:
            self._wakeup.set()  # a slot is free

    async def _run_one(self, batch: list[_Job]) -> None:
        assert self._loop is not None and self._executor is not None
        started = time.monotonic()
        waits = [started - job.enqueued for job in batch]
        self._in_flight += len(batch)
        try:
            call = self._executor.submit(self._run_isolated, [job.request for job in batch])
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)
            results = await asyncio.wrap_future(call, loop=self._loop)
        except BaseException:  # cancelled (a drain that timed out)
            for job in batch:
                if not job.future.done():
                    job.future.set_result(OverloadedError("the server is shutting down", retry_after=1.0))
            raise
        finally:
            self._in_flight -= len(batch)
        seconds = time.monotonic() - started
        self._record(len(batch), sum(job.tokens for job in batch), seconds, waits)
        for job, result in zip(batch, results, strict=True):
            if not job.future.done():  # the caller may have gone away meanwhile
                job.future.set_result(result)

    def _run_isolated(self, requests: list[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        """Run one batch in the engine thread; if the batch as a whole fails, isolate the failure.

        Out of memory: split the batch in halves and retry each (a smaller pass needs less
        memory). Any other failure: retry each request alone. A single request's failure becomes
        its own error (:class:`OverloadedError` for out of memory).
        """
        try:
            results = list(self._run_batch(requests))
            if len(results) != len(requests):
                raise EngineError(f"the engine returned {len(results)} results for {len(requests)} requests")
            return results
        except Exception as exc:  # noqa: BLE001 - one request must not fail the batch
            if len(requests) == 1:
                return [self._as_engine_error(exc)]
            if is_out_of_memory(exc):
                half = len(requests) // 2
                logger.warning(
                    "a batch of %d ran out of memory; retrying as %d + %d",
                    len(requests),
                    half,
                    len(requests) - half,
                )
                return self._run_isolated(requests[:half]) + self._run_isolated(requests[half:])
            logger.warning("a batch of %d failed (%s); retrying each request alone", len(requests), type(exc).__name__)
            return [res for req in requests for res in self._run_isolated([req])]

    def _as_engine_error(self, exc: Exception) -> LogitJudgeError:
        if isinstance(exc, LogitJudgeError):
            return exc
        if is_out_of_memory(exc):
            logger.warning("a single request ran out of memory: %s", type(exc).__name__)
            err: LogitJudgeError = OverloadedError(
                "the engine ran out of memory for this request; retry later, or send a smaller request",
                retry_after=self.retry_after(),
            )
        else:
            logger.exception("engine failure", exc_info=exc)
            err = EngineError(f"the engine failed: {type(exc).__name__}")
        err.__cause__ = exc
        return err

    def _record(self, size: int, tokens: int, seconds: float, waits: list[float]) -> None:
        # Exponential moving averages (weight 0.2) for the Retry-After hint.
        self._avg_batch_seconds += 0.2 * (seconds - self._avg_batch_seconds)
        self._avg_batch_size += 0.2 * (size - self._avg_batch_size)
        self._observer.batch_done(size, tokens, seconds, waits)

    # -- shutdown ----------------------------------------------------------------------------

    async def close(self, *, timeout: float | None = None) -> None:
        """Stop accepting requests, answer every accepted one, then stop the worker.

        Args:
            timeout: seconds to wait for the drain; past it, requests still waiting get
                :class:`OverloadedError` and the running batch is abandoned to its thread.
        """
        self._closing = True
        if self._wakeup is not None:
            self._wakeup.set()
        worker = self._worker
        if worker is not None and not worker.done() and self._loop is asyncio.get_running_loop():
            try:
                await asyncio.wait_for(asyncio.shield(worker), timeout)
            except asyncio.TimeoutError:
                logger.warning(
                    "drain timed out after %.1f s; refusing %d waiting requests", timeout, len(self._pending)
                )
                worker.cancel()
        while self._pending:
            job = self._pending.popleft()
            if not job.future.done():
                job.future.set_result(OverloadedError("the server is shutting down", retry_after=1.0))
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None


_OOM_CLASS_NAMES = frozenset({"OutOfMemoryError", "MemoryError"})


def is_out_of_memory(exc: BaseException) -> bool:
    """True for an out-of-memory error of any device, without importing torch.

    ``torch.OutOfMemoryError`` (alias ``torch.cuda.OutOfMemoryError``), Python's ``MemoryError``,
    and the ``RuntimeError`` older torch builds and other backends raise ("CUDA out of memory",
    "MPS backend out of memory", "DefaultCPUAllocator: can't allocate memory").
    """
    if any(cls.__name__ in _OOM_CLASS_NAMES for cls in type(exc).__mro__):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)
