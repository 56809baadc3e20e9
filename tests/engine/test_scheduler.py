"""The async scheduler: batching under a budget, a bounded queue, cancellation, drain.

The engine here is the scripted one (fixed probabilities) behind a gate the test opens, so the
test decides what is queued while a batch runs. Batching equivalence with the real model is in
``tests/server/test_real_engine.py``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest
from support.scripted import ScriptedEngine

from logitjudge.engine.scheduler import Scheduler, estimate_tokens
from logitjudge.engine.types import EngineRequest, EngineResult, Option, Question
from logitjudge.errors import ContextOverflowError, EngineError, LogitJudgeError, OverloadedError


def request(state: str = "hello", n: int = 2) -> EngineRequest:
    q = Question("choice", "Which?", tuple(Option(f"o{i}") for i in range(n)))
    return EngineRequest(state=state, questions=(q,))


class GatedEngine(ScriptedEngine):
    """The scripted engine; its first ``run_batch`` waits until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def run_batch(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        self.entered.set()
        assert self.gate.wait(timeout=30), "the test never opened the gate"
        return super().run_batch(requests)


async def _until(predicate, what: str) -> None:
    for _ in range(5000):
        if predicate():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"never happened: {what}")


def test_concurrent_requests_share_one_engine_call() -> None:
    engine = GatedEngine()
    scheduler = Scheduler(engine.run_batch, max_batch_requests=64)

    async def main() -> list[EngineResult]:
        first = asyncio.ensure_future(scheduler.submit(request("first")))
        await asyncio.to_thread(engine.entered.wait, 30)
        rest = [asyncio.ensure_future(scheduler.submit(request(f"r{i}"))) for i in range(5)]
        await _until(lambda: scheduler.waiting == 5, "5 requests waiting")
        engine.gate.set()
        return await asyncio.gather(first, *rest)

    results = asyncio.run(main())
    assert [len(c) for c in engine.calls] == [1, 5]
    assert [r.state for r in engine.calls[1]] == [f"r{i}" for i in range(5)]  # arrival order
    assert all(len(r.answers) == 1 for r in results)


def test_token_budget_splits_batches_in_arrival_order() -> None:
    engine = GatedEngine()
    per_request = estimate_tokens(request("x" * 400))
    scheduler = Scheduler(engine.run_batch, max_num_batched_tokens=2 * per_request)

    async def main() -> None:
        first = asyncio.ensure_future(scheduler.submit(request("blocker")))
        await asyncio.to_thread(engine.entered.wait, 30)
        rest = [asyncio.ensure_future(scheduler.submit(request(f"{i}" + "x" * 399))) for i in range(5)]
        await _until(lambda: scheduler.waiting == 5, "5 waiting")
        engine.gate.set()
        await asyncio.gather(first, *rest)

    asyncio.run(main())
    assert [len(c) for c in engine.calls] == [1, 2, 2, 1]
    assert [r.state[0] for c in engine.calls[1:] for r in c] == ["0", "1", "2", "3", "4"]


def test_a_request_over_the_budget_still_runs_alone() -> None:
    engine = ScriptedEngine()
    scheduler = Scheduler(engine.run_batch, max_num_batched_tokens=1)
    result = asyncio.run(scheduler.submit(request("a long state " * 100)))
    assert len(result.answers) == 1 and [len(c) for c in engine.calls] == [1]


def test_max_batch_requests_one_runs_one_at_a_time() -> None:
    engine = GatedEngine()
    scheduler = Scheduler(engine.run_batch, max_batch_requests=1)

    async def main() -> None:
        first = asyncio.ensure_future(scheduler.submit(request()))
        await asyncio.to_thread(engine.entered.wait, 30)
        rest = [asyncio.ensure_future(scheduler.submit(request())) for _ in range(3)]
        await _until(lambda: scheduler.waiting == 3, "3 waiting")
        engine.gate.set()
        await asyncio.gather(first, *rest)

    asyncio.run(main())
    assert [len(c) for c in engine.calls] == [1, 1, 1, 1]


def test_full_queue_refuses_at_once_and_a_cancelled_caller_frees_its_place() -> None:
    engine = GatedEngine()
    scheduler = Scheduler(engine.run_batch, max_queue=1)

    async def main() -> None:
        running = asyncio.ensure_future(scheduler.submit(request("running")))
        await asyncio.to_thread(engine.entered.wait, 30)
        waiting = asyncio.ensure_future(scheduler.submit(request("gone")))
        await _until(lambda: scheduler.waiting == 1, "1 waiting")
        with pytest.raises(OverloadedError) as refused:
            await scheduler.submit(request("refused"))
        assert refused.value.retry_after >= 1
        waiting.cancel()  # the client went away
        await asyncio.gather(waiting, return_exceptions=True)
        assert scheduler.waiting == 0
        later = asyncio.ensure_future(scheduler.submit(request("later")))
        await _until(lambda: scheduler.waiting == 1, "the later request queued")
        engine.gate.set()
        await asyncio.gather(running, later)

    asyncio.run(main())
    states = [r.state for c in engine.calls for r in c]
    assert states == ["running", "later"]  # the cancelled request never reached the engine


def test_per_request_errors_do_not_fail_neighbours() -> None:
    class OverflowOnLong(ScriptedEngine):
        def run_batch(self, requests):
            out = super().run_batch(requests)
            return [
                ContextOverflowError("too long", part="state", tokens=9, limit=1) if len(r.state) > 10 else res
                for r, res in zip(requests, out, strict=True)
            ]

    engine = OverflowOnLong()
    scheduler = Scheduler(engine.run_batch)

    async def main():
        return await asyncio.gather(
            scheduler.submit(request("short")), scheduler.submit(request("x" * 50)), return_exceptions=True
        )

    ok, bad = asyncio.run(main())
    assert isinstance(ok, EngineResult)
    assert isinstance(bad, ContextOverflowError)
    assert [len(c) for c in engine.calls] == [2]


def test_a_batch_that_raises_is_retried_request_by_request() -> None:
    class FailsOnPoison(ScriptedEngine):
        def run_batch(self, requests):
            if any(r.state == "poison" for r in requests):
                self.calls.append(list(requests))
                raise RuntimeError("boom")
            return super().run_batch(requests)

    engine = FailsOnPoison()
    scheduler = Scheduler(engine.run_batch)

    async def main():
        return await asyncio.gather(
            scheduler.submit(request("fine")), scheduler.submit(request("poison")), return_exceptions=True
        )

    fine, poison = asyncio.run(main())
    assert isinstance(fine, EngineResult)
    assert isinstance(poison, EngineError) and not isinstance(poison, OverloadedError)
    assert [len(c) for c in engine.calls] == [2, 1, 1]


class MemoryCappedEngine(GatedEngine):
    """The gated scripted engine with a memory: a batch over ``capacity`` requests, or any batch
    holding a state marked ``HUGE``, raises torch's real out-of-memory error, as a GPU engine does."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.oom_sizes: list[int] = []

    def run_batch(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        import torch

        self.entered.set()
        assert self.gate.wait(timeout=30), "the test never opened the gate"
        if len(requests) > self.capacity or any("HUGE" in str(r.state) for r in requests):
            self.oom_sizes.append(len(requests))
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return ScriptedEngine.run_batch(self, requests)


def test_out_of_memory_splits_the_batch_then_refuses_only_what_still_fails() -> None:
    engine = MemoryCappedEngine(capacity=2)
    scheduler = Scheduler(engine.run_batch, max_batch_requests=8)
    states = ["blocker", "a", "b", "c", "HUGE", "d", "e", "f", "g"]

    async def main() -> list[EngineResult | BaseException]:
        first = asyncio.ensure_future(scheduler.submit(request(states[0])))
        await asyncio.to_thread(engine.entered.wait, 30)
        rest = [asyncio.ensure_future(scheduler.submit(request(s))) for s in states[1:]]
        await _until(lambda: scheduler.waiting == 8, "8 waiting")
        engine.gate.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    results = asyncio.run(main())
    by_state = dict(zip(states, results, strict=True))
    huge = by_state.pop("HUGE")
    assert isinstance(huge, OverloadedError) and huge.retry_after >= 1  # 529 + Retry-After at the edge
    assert "out of memory" in huge.message
    assert all(isinstance(r, EngineResult) for r in by_state.values())
    # depth first: 8 -> [a b c HUGE] -> [a b] ok, [c HUGE] -> c ok, HUGE alone fails; [d e f g] -> 2 + 2
    assert engine.oom_sizes == [8, 4, 2, 1, 4]
    answered = [r.state for call in engine.calls for r in call]
    assert sorted(answered) == sorted(s for s in states if s != "HUGE")


def test_out_of_memory_errors_are_recognised_without_torch_in_the_scheduler() -> None:
    import torch

    from logitjudge.engine.scheduler import is_out_of_memory

    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"))
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory"))
    assert not is_out_of_memory(RuntimeError("boom")) and not is_out_of_memory(ValueError("out of memory"))


def test_close_drains_accepted_requests_then_refuses_new_ones() -> None:
    engine = GatedEngine()
    scheduler = Scheduler(engine.run_batch)

    async def main() -> None:
        accepted = [asyncio.ensure_future(scheduler.submit(request(f"{i}"))) for i in range(4)]
        await asyncio.to_thread(engine.entered.wait, 30)
        closing = asyncio.ensure_future(scheduler.close(timeout=30))
        await _until(lambda: scheduler.closing, "closing")
        with pytest.raises(OverloadedError):
            await scheduler.submit(request("late"))
        engine.gate.set()
        await closing
        results = await asyncio.gather(*accepted)
        assert all(isinstance(r, EngineResult) for r in results)

    asyncio.run(main())
    assert sum(len(c) for c in engine.calls) == 4


def test_estimate_is_cheap_and_grows_with_text() -> None:
    small, big = estimate_tokens(request("a")), estimate_tokens(request("a" * 4000))
    assert big - small == 4000 // 4
    structured = EngineRequest(state={"k": ["v" * 100]}, questions=request().questions)
    assert estimate_tokens(structured) > small


@pytest.mark.parametrize(("concurrent", "expect_running"), [(4, 2), (1, 1)])
def test_with_concurrent_batches_a_request_does_not_wait_for_the_running_one(
    concurrent: int, expect_running: int
) -> None:
    """The vLLM backend's setting (``max_concurrent_batches`` > 1): a request that arrives while
    another is in the engine is handed to the engine at once; with 1 (transformers) it waits."""
    engine = GatedEngine()
    calls: list[int] = []
    lock = threading.Lock()

    def run_batch(requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        with lock:
            calls.append(len(requests))
        return engine.run_batch(requests)

    scheduler = Scheduler(run_batch, max_concurrent_batches=concurrent)

    async def main() -> tuple[int, int]:
        first = asyncio.ensure_future(scheduler.submit(request("first")))
        await asyncio.to_thread(engine.entered.wait, 30)
        second = asyncio.ensure_future(scheduler.submit(request("second")))
        await asyncio.sleep(0.2)  # time for the worker to hand it over, if it may
        seen = (len(calls), scheduler.in_flight)
        engine.gate.set()
        await asyncio.gather(first, second)
        await scheduler.close()
        return seen

    assert asyncio.run(main()) == (expect_running, expect_running)
