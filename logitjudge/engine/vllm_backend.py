"""The vLLM backend: token-id prompts in, label log-probs out, on vLLM's engine.

Everything before and after is ours: :mod:`~logitjudge.engine.prompt` makes the token ids and
the labels, :mod:`~logitjudge.engine.pack` decides which next-token log-probs a label needs,
:mod:`~logitjudge.engine.readout` turns label log-probs into (calibrated) probabilities. This
module only asks vLLM for ``log p(token | context)``::

    backend = VllmBackend(model_dir, VllmConfig(tensor_parallel_size=4), dtype="bfloat16", max_model_len=32769)
    scores, labels = backend.label_log_probs(plans)     # (N_labels,) fp32, LabelTerm per label
    backend.counters()                                  # vLLM's own prompt / cached token counters
    backend.close()

**Mapping.** ``pack.add_request`` lays a request out as a tree (the state prefix, one branch per
question view, one continuation per multi-token label) and lists, per label, its terms
``(read, token)``: the read's context is every token of its ancestor segments plus its own up to
the read. Each distinct context becomes one vLLM request ``TokensPrompt(context)`` with
``SamplingParams(max_tokens=1, logprob_token_ids=[the tokens read there])``: vLLM returns
``log p(token | context)`` for exactly those ids (raw logits, log-softmax over the whole
vocabulary, before any sampling transform), at most
:data:`MAX_IDS_PER_REQUEST` ids per request (a 255-option choice is two requests on the same
context). A label's score is the sum of its terms, as in the transformers readout. Every request
of a batch is submitted at once; vLLM's automatic prefix caching computes the shared state's KV
blocks once (whole ``block_size`` blocks only) and its scheduler batches the rest continuously.

**Engine.** An in-process :class:`vllm.v1.engine.async_llm.AsyncLLM` on a private event loop in
a daemon thread; :meth:`VllmBackend.label_log_probs` may be called from several threads at once
(the server's scheduler does, see ``SchedulerConfig.max_concurrent_batches``). vLLM starts its
engine core in a subprocess with ``spawn``: scripts need an ``if __name__ == "__main__"`` guard.

**Errors.** vLLM's ``EngineDeadError`` becomes our :class:`~logitjudge.errors.EngineDeadError`
(not retryable), an out-of-memory failure :class:`~logitjudge.errors.OverloadedError`
(retryable), anything else :class:`~logitjudge.errors.EngineError`; a prompt vLLM refuses as too
long cannot reach it (``Engine`` caps ``max_state_tokens`` at ``max_model_len - 1`` and answers 413).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from logitjudge.engine.config import VllmConfig
from logitjudge.engine.pack import LabelTerm, RequestPlan, Tree, add_request
from logitjudge.errors import EngineDeadError, EngineError, LogitJudgeError, OverloadedError, UnsupportedModelError

__all__ = ["VllmBackend", "MAX_IDS_PER_REQUEST", "contexts_of"]

logger = logging.getLogger("logitjudge.engine.vllm")

MAX_IDS_PER_REQUEST = 128
"""vLLM's ``MAX_LOGPROB_TOKEN_IDS``: the most ``logprob_token_ids`` one request may ask for."""

CPU_BLOCK_MULTIPLE = 32
"""vLLM's CPU attention kernel takes KV blocks of a multiple of 32 tokens only (0.32.0)."""

_START_TIMEOUT_S = 900.0  # a large model under tensor parallelism can take minutes to load


def contexts_of(tree: Tree) -> list[tuple[int, ...]]:
    """Per read of ``tree``: the token ids its next-token log-probs are conditioned on.

    That is every token of the read's ancestor segments (root first) and of its own segment up
    to and including the read offset: the same tokens, in the same positions, as a separate
    causal pass over that context (``pack`` restarts each branch's positions after the prefix).
    """
    full: list[tuple[int, ...]] = []  # per segment: ancestors' tokens + its own
    for seg in tree.segments:  # parents come before children
        full.append((full[seg.parent] if seg.parent >= 0 else ()) + seg.tokens)
    out = []
    for s, off in tree.reads:
        seg = tree.segments[s]
        start = len(full[s]) - len(seg.tokens)
        out.append(full[s][: start + off + 1])
    return out


def _is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, MemoryError | torch.OutOfMemoryError) or "out of memory" in text


class VllmBackend:
    """An in-process vLLM engine that scores label tokens.

    Args:
        model_dir: a transformers model directory (``model.resolve_model``: the same directory
            the transformers backend loads).
        config: vLLM's options (:class:`~logitjudge.engine.config.VllmConfig`).
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"`` (the engine's resolved dtype).
        max_model_len: vLLM's context length (longest prompt + 1).
        device: ``"cpu"`` or ``"cuda"`` (decides how ``config.kv_cache_gib`` is applied).

    Raises:
        UnsupportedModelError: vLLM is not installed, or cannot load the model.
    """

    def __init__(self, model_dir: Path, config: VllmConfig, *, dtype: str, max_model_len: int, device: str) -> None:
        # vLLM logs to stdout by default, set up when it is first imported (here): stdout is the
        # CLI's answer (`logitjudge ask` prints JSON there), so its logs go to stderr, in its
        # engine processes too (they inherit the environment). A user's own setting wins.
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        try:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise UnsupportedModelError(
                f"the vllm backend needs vLLM ({exc}); on CPU `make vllm-env`, on CUDA `pip install -e '.[vllm]'`"
            ) from None
        if device == "cpu" and config.block_size % CPU_BLOCK_MULTIPLE:
            # vLLM's CPU attention refuses it deep in its worker ("No common block size for 16")
            raise UnsupportedModelError(
                f"vllm.block_size {config.block_size}: vLLM's CPU attention needs a multiple of {CPU_BLOCK_MULTIPLE}"
            )
        if device == "cpu":
            # vLLM's CPU worker reads these when it starts (its processes inherit our environment).
            os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")  # use every core for the model
            if config.kv_cache_gib is not None:
                os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(config.kv_cache_gib)
        args: dict[str, Any] = {
            "model": str(model_dir),
            "tokenizer": str(model_dir),
            "dtype": dtype,
            "max_model_len": max_model_len,
            "block_size": config.block_size,
            "enable_prefix_caching": True,
            "enforce_eager": config.enforce_eager,
            "tensor_parallel_size": config.tensor_parallel_size,
            "pipeline_parallel_size": config.pipeline_parallel_size,
            "data_parallel_size": config.data_parallel_size,
            "distributed_executor_backend": config.distributed_executor_backend,
            "disable_log_stats": False,  # the prompt / cached token counters (counters())
            "seed": 0,
        }
        if config.gpu_memory_utilization is not None:
            args["gpu_memory_utilization"] = config.gpu_memory_utilization
        if device != "cpu" and config.kv_cache_gib is not None:
            args["kv_cache_memory_bytes"] = int(config.kv_cache_gib * (1 << 30))
        self.config = config
        self.max_model_len = max_model_len
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="logitjudge-vllm", daemon=True)
        self._thread.start()

        async def start() -> Any:
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**args))

        try:
            self._llm = asyncio.run_coroutine_threadsafe(start(), self._loop).result(_START_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - any start-up failure is "cannot serve this"
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise UnsupportedModelError(f"vLLM could not start on {model_dir}: {type(exc).__name__}: {exc}") from exc
        # every entry point (ask, evaluate, calibrate, scripts) stops vLLM's processes at exit
        atexit.register(self.close)

    # -- scoring -----------------------------------------------------------------------------

    def label_log_probs(self, plans: Sequence[RequestPlan]) -> tuple[torch.Tensor, list[LabelTerm]]:
        """Score every label of every view of ``plans``.

        Returns:
            ``(scores, labels)``: (N_labels,) fp32 ``log p(label | prompt)`` (the sum over the
            label's tokens), and the labels in the order of ``pack.add_request`` over ``plans``
            (what :meth:`Readout.final_distributions` takes).

        Raises:
            EngineDeadError: vLLM's engine died (not retryable).
            OverloadedError: vLLM ran out of memory (retryable).
            EngineError: any other vLLM failure.
        """
        if self._llm is None:
            raise EngineDeadError("the vLLM engine was closed")
        tree = Tree()
        for r, plan in enumerate(plans):
            add_request(tree, plan, r)
        contexts = contexts_of(tree)
        wanted: dict[tuple[int, ...], list[int]] = {}  # context -> token ids read there (ordered, unique)
        for label in tree.labels:
            for read, token in label.terms:
                ids = wanted.setdefault(contexts[read], [])
                if token not in ids:
                    ids.append(token)
        jobs = [
            (ctx, ids[i : i + MAX_IDS_PER_REQUEST])
            for ctx, ids in wanted.items()
            for i in range(0, len(ids), MAX_IDS_PER_REQUEST)
        ]
        found = self._run(self._score_all(jobs))
        values = [
            sum(found[(contexts[read], token)] for read, token in label.terms) for label in tree.labels
        ]  # fp64 sums of fp32 terms, like the transformers readout's index_add
        return torch.tensor(values, dtype=torch.float32), tree.labels

    async def _score_all(
        self, jobs: list[tuple[tuple[int, ...], list[int]]]
    ) -> dict[tuple[tuple[int, ...], int], float]:
        results = await asyncio.gather(*(self._score_one(ctx, ids) for ctx, ids in jobs))
        found: dict[tuple[tuple[int, ...], int], float] = {}
        for (ctx, _ids), scored in zip(jobs, results):
            for token, logprob in scored.items():
                found[(ctx, token)] = logprob
        return found

    async def _score_one(self, context: tuple[int, ...], ids: list[int]) -> dict[int, float]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=ids, detokenize=False)
        final = None
        async for out in self._llm.generate(TokensPrompt(prompt_token_ids=list(context)), params, uuid.uuid4().hex):
            final = out
        if final is None or not final.outputs or not final.outputs[0].logprobs:
            raise EngineError("vLLM returned no log-probs for a label request")
        step = final.outputs[0].logprobs[0]  # {token id: Logprob} for the one sampled position
        return {token: float(step[token].logprob) for token in ids}

    def _run(self, coro: Any) -> Any:
        """Run ``coro`` on the engine's loop from any thread; vLLM's errors become ours."""
        try:
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
        except LogitJudgeError:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped to the one exception tree
            raise _map_error(exc) from exc

    # -- observability -----------------------------------------------------------------------

    def counters(self) -> dict[str, float]:
        """vLLM's own cumulative counters of this process (Prometheus names without ``vllm:``):
        ``prompt_tokens``, ``prompt_tokens_cached`` (prompt tokens whose KV came from the prefix
        cache), ``prefix_cache_queries`` and ``prefix_cache_hits`` (tokens), summed over engines."""
        from vllm.v1.metrics.reader import Counter, get_metrics_snapshot

        names = ("prompt_tokens", "prompt_tokens_cached", "prefix_cache_queries", "prefix_cache_hits")
        out = dict.fromkeys(names, 0.0)
        for metric in get_metrics_snapshot():
            name = metric.name.removeprefix("vllm:")
            if isinstance(metric, Counter) and name in out:
                out[name] += float(metric.value)
        return out

    def reset_prefix_cache(self) -> None:
        """Drop every cached KV block (benchmarks: time a request whose state is not cached yet)."""
        self._run(self._llm.reset_prefix_cache())

    def check_health(self) -> None:
        """Raise :class:`~logitjudge.errors.EngineDeadError` if vLLM's engine is dead."""
        self._run(self._llm.check_health())

    def close(self) -> None:
        """Stop vLLM's engine processes and the loop thread (idempotent; also run at exit)."""
        if self._llm is None or not self._thread.is_alive():
            return
        atexit.unregister(self.close)
        try:
            self._llm.shutdown()
            self._llm = None  # AsyncLLM.__del__ shuts down again, at interpreter exit otherwise
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)


def _map_error(exc: BaseException) -> LogitJudgeError:
    """vLLM's failures in our tree: dead engine, out of memory (retryable), anything else."""
    kind = type(exc).__name__
    if kind == "EngineDeadError":
        return EngineDeadError(f"the vLLM engine died: {exc}")
    if _is_out_of_memory(exc):
        return OverloadedError("the vLLM engine ran out of memory; retry later, or send a smaller request")
    return EngineError(f"the vLLM engine failed: {kind}: {exc}")
