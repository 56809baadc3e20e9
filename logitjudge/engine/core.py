"""The engine: typed request -> plan -> forward -> readout -> answers, one pass per batch.

::

    engine = Engine.load()                       # default model, parity self-check included
    engine = Engine.load(None, EngineConfig(strategy="prefix_rows"))     # or Engine.load(strategy=...)
    engine.run_batch([EngineRequest(state, questions)])  -> [EngineResult]

``plan`` validates and tokenizes (raising typed errors that name the field and the count),
``Runner`` runs the chosen strategy, ``Readout`` turns hidden states into the final (calibrated)
probabilities.

Limits: 2..255 choice options, 2..10 score levels (:data:`~logitjudge.engine.types.MAX_CHOICE_OPTIONS`,
:data:`~logitjudge.engine.types.MAX_SCORE_LEVELS`); the state plus the longest question at most
``max_state_tokens`` (32,768, or the model's own context if smaller); the whole request at most
``max_request_tokens`` (defaults and docs: :class:`~logitjudge.engine.config.EngineConfig`).
Nothing is ever truncated.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from logitjudge.engine.adapters import BranchAdapter, check_adapter
from logitjudge.engine.attention import resolve_attn, set_attn
from logitjudge.engine.calibration import Calibration
from logitjudge.engine.config import EngineConfig
from logitjudge.engine.decision import question_prompt
from logitjudge.engine.heads import Head, check_head
from logitjudge.engine.model import LoadedModel, layers_ignore_masks, load_model
from logitjudge.engine.pack import LabelTerm, QuestionPlan, RequestPlan
from logitjudge.engine.precision import MIXED, cpu_has_native_bf16, resolve_state_dtype
from logitjudge.engine.prompt import QuestionPrompt
from logitjudge.engine.question_types import question_type
from logitjudge.engine.readout import Distribution, Readout, distributions
from logitjudge.engine.runner import Runner
from logitjudge.engine.state_cache import StateCache
from logitjudge.engine.types import Answer, EngineRequest, EngineResult, Option, Question, Usage, render_text
from logitjudge.errors import (
    ConfigurationError,
    ContextOverflowError,
    EngineDeadError,
    InvalidRequestError,
    LogitJudgeError,
    UnsupportedModelError,
)

logger = logging.getLogger("logitjudge.engine")

SELF_CHECK_REQUEST = EngineRequest(
    state="Order 1182: the customer paid twice for one blender and asks for the second charge back.",
    questions=(
        Question("noul", "Does the customer want money back?", (Option("true", None), Option("false", None))),
        Question(
            "choice",
            "Which team should handle this?",
            tuple(Option(n, d) for n, d in [("Billing", "payments"), ("Shipping", None), ("Tech", "bugs")]),
        ),
        Question(
            "score",
            "How upset is the customer?",
            tuple(Option(str(i), t) for i, t in enumerate(["calm", "annoyed", "furious"])),
        ),
    ),
)


# Max |dp| between a strategy and separate passes, per weight dtype. fp32: rounding of a
# different summation order only (measured <= 2.6e-6 on the default model). Half precision:
# packed and separate passes round attention and matmuls over different shapes (bf16 keeps 8
# mantissa bits, eps 7.8e-3; fp16 11, eps 9.8e-4). bf16 measured on CPU (SmolLM2-135M,
# benchmarks/results/dtype-parity-cpu.md): 0.027 packed, 0.041 prefix_packed, 0.018 prefix_rows.
# fp16 shares bf16's bound until GPU measurements justify a tighter one (benchmarks/checks/gpu_check.py
# reports the measured max |dp| per dtype). Half precision is never the CPU default.
TOLERANCES = {torch.float32: 1e-4, torch.float16: 5e-2, torch.bfloat16: 5e-2}


def tolerance_for(dtype: torch.dtype) -> float:
    """Max |dp| allowed between a strategy and separate passes for weights in ``dtype``.

    1e-4 in fp32, 5e-2 in fp16 and bf16; any other dtype gets the loosest.
    """
    return TOLERANCES.get(dtype, max(TOLERANCES.values()))


class Engine:
    """A loaded model with its prompt builder, runner and readout.

    Args:
        lm: the loaded model.
        config: strategy, attention and budgets (:class:`~logitjudge.engine.config.EngineConfig`,
            whose field docs are the reference; default: its defaults). Its ``device``, ``dtype``
            and ``self_check`` matter to :meth:`load` only: ``lm`` is already loaded.
        max_single_token_labels: see :class:`~logitjudge.engine.prompt.PromptBuilder` (tests only).
        options: :class:`EngineConfig` fields replacing ``config``'s (``None`` = keep), e.g.
            ``Engine(lm, strategy="prefix_rows")``.

    Packed rows longer than ``dense_mask_max_tokens`` never get a dense mask: flex block masks,
    or prefix_rows. ``self.config`` is the configuration asked for; ``strategy`` and ``attn``
    (and ``describe()``) are what runs (``auto`` resolved, a failed self-check's fallback).
    """

    def __init__(
        self,
        lm: LoadedModel,
        config: EngineConfig | None = None,
        *,
        max_single_token_labels: int | None = None,
        **options: Any,
    ) -> None:
        config = (config or EngineConfig()).with_options(**options)
        self.config = config
        self.lm = lm
        lm.model.eval()
        lm.model.requires_grad_(False)
        self.name = lm.name
        self.prompt: QuestionPrompt = question_prompt(
            lm.source, lm.tokenizer, config.prompt_version, max_single_token_labels
        )
        self.mask_ignoring = layers_ignore_masks(lm.model.config)
        strategy = config.strategy
        if strategy == "auto" and self.mask_ignoring:
            strategy = "prefix_rows"
        if self.mask_ignoring and strategy in ("packed", "prefix_packed"):
            raise ConfigurationError(
                f"{lm.model.config.model_type} has layers that ignore attention masks: use prefix_rows",
                field=("strategy",),
            )
        if strategy == "prefix_packed" and Runner.uses_windows(lm.model.config):
            # a sliding-window layer's cache keeps only the last `window` prefix tokens, so
            # branches packed after it cannot all see the keys they need
            raise ConfigurationError(
                "prefix_packed does not support sliding-window models: use packed or prefix_rows",
                field=("strategy",),
            )
        self.strategy = strategy
        context = getattr(lm.model.config, "max_position_embeddings", None) or config.max_state_tokens
        self.max_state_tokens = min(config.max_state_tokens, int(context))
        self.max_request_tokens = config.max_request_tokens
        self.attn = resolve_attn(config.attn, lm.model, lm.device, mask_ignoring=self.mask_ignoring)
        set_attn(lm.model, self.attn)
        self.state_dtype = resolve_state_dtype(
            config.dtype, lm.device, lm.dtype, strategy=strategy, mask_ignoring=self.mask_ignoring
        )
        """The dtype of the state's forward when it differs from the weights' (mixed precision,
        :mod:`logitjudge.engine.precision`), else ``None``."""
        self.state_cache = StateCache(
            config.state_cache_mb << 20, (lm.fingerprint, self.precision, self.prompt.version)
        )
        self.runner = Runner(
            lm.model,
            lm.device,
            lm.dtype,
            max_row_tokens=config.max_row_tokens,
            stepwise=self.mask_ignoring,
            dense_mask_max_tokens=config.dense_mask_max_tokens,
            state_cache=self.state_cache if self.state_cache.enabled else None,
            state_dtype=self.state_dtype,
        )
        self.path_counts: collections.Counter[str] = collections.Counter()
        self._adapters: dict[str, BranchAdapter] = {}
        self.readout = Readout(lm.model)
        self.readout.decision_head = getattr(self.prompt, "head", None)  # a checkpoint's own head (engine.interop)

    @classmethod
    def load(cls, model: str | None = None, config: EngineConfig | None = None, **options: Any) -> Engine:
        """Load a model (see :func:`logitjudge.engine.model.load_model`) and self-check it.

        Args:
            model: see :func:`~logitjudge.engine.model.load_model` (``None`` = the default model).
            config: device, dtype, strategy, attention, budgets and ``self_check``
                (:class:`~logitjudge.engine.config.EngineConfig`; default: its defaults).
            options: fields replacing ``config``'s (``None`` = keep), e.g. ``device="cpu"``.

        The self-check runs on the device and in the dtype that will serve, with
        :func:`tolerance_for` that dtype; with FlexAttention it also compiles the kernel, so the
        first request does not.

        The transformers backend only; :func:`~logitjudge.engine.loading.load_engine` loads any
        (``backend="vllm"``: a :class:`~logitjudge.engine.vllm_engine.VllmEngine`, same interface).

        Raises:
            UnsupportedModelError: the model or tokenizer cannot be served.
            ConfigurationError: an unknown device, dtype, strategy or attention, or one this
                model refuses (e.g. ``packed`` with ``dtype=mixed``).
            EngineDeadError: the strategy disagrees with separate passes on this device.
        """
        config = (config or EngineConfig()).with_options(**options)
        if config.backend != "transformers":
            raise ConfigurationError(
                f"Engine.load runs the transformers backend; for {config.backend!r} use "
                "logitjudge.engine.loading.load_engine (or Judge.load(backend=...))",
                field=("backend",),
            )
        t0 = time.perf_counter()
        engine = cls(load_model(model, device=config.device, dtype=config.dtype), config)
        logger.info(
            "loaded %s on %s (%s, %s attention) in %.1f s",
            engine.name,
            engine.lm.device,
            engine.lm.dtype,
            engine.attn,
            time.perf_counter() - t0,
        )
        if config.self_check:
            try:
                engine.self_check()
            except EngineDeadError:
                if config.strategy != "auto":
                    raise
                # auto: separate passes are correct by construction, only slower
                logger.warning("self-check failed for %s; falling back to separate passes", engine.strategy)
                engine.strategy = "separate"
        return engine

    @property
    def precision(self) -> str:
        """The precision mode that runs: ``mixed`` (the state in bf16, questions in fp32), or the
        weights' dtype (``float32``, ``bfloat16``, ``float16``)."""
        return MIXED if self.state_dtype is not None else str(self.lm.dtype).replace("torch.", "")

    def describe(self) -> dict[str, Any]:
        """Model, source, device, dtype, precision, strategy, prompt version, heads and limits.

        ``heads``: the loaded heads' names; ``head_evaluators``: per head, the ``name@version`` of
        the evaluator whose question it was trained on (``None`` when its folder does not say).

        ``dtype`` is the weights' (and the questions' forwards'), which calibrations and heads
        are bound to; ``precision`` is the mode (``mixed``: the state's forward in ``state_dtype``)."""
        return {
            "model": self.name,
            "backend": "transformers",
            "source": self.lm.source,
            "device": str(self.lm.device),
            "dtype": str(self.lm.dtype).replace("torch.", ""),
            "precision": self.precision,
            "state_dtype": str(self.state_dtype or self.lm.dtype).replace("torch.", ""),
            "cpu_native_bf16": cpu_has_native_bf16(),
            "strategy": self.strategy,
            "attn": self.attn,
            "dense_mask_max_tokens": self.runner.dense_mask_max_tokens,
            "state_cache_mb": self.state_cache.max_bytes >> 20,
            "prompt_version": self.prompt.version,
            "fingerprint": self.lm.fingerprint,
            "calibration": self.calibration.digest if self.calibration is not None else None,
            "calibration_origin": self.calibration.origin if self.calibration is not None else None,
            "heads": sorted(self.heads),
            "adapters": list(self.runner.adapters.names),
            "adapter_evaluators": {a.name: a.binding.get("evaluator") for a in self.adapters.values()},
            "head_evaluators": {n: h.meta.get("evaluator") for n, h in sorted(self.heads.items())},
            "max_state_tokens": self.max_state_tokens,
            "max_request_tokens": self.max_request_tokens,
            "max_row_tokens": self.runner.max_row_tokens,
        }

    @property
    def calibration(self) -> Calibration | None:
        """The calibration the readout applies (see :meth:`set_calibration`)."""
        return self.readout.calibration

    def set_calibration(self, calibration: Calibration | None) -> None:
        """Hand ``calibration`` to the readout, which applies it to every answer from now on
        (``None`` removes it).

        Raises:
            CalibrationMismatchError: it was fitted for another fingerprint, prompt version,
                or dtype (the strategy is recorded, not matched).
        """
        if calibration is not None:
            calibration.check(self.describe())
        self.readout.calibration = calibration

    @property
    def heads(self) -> dict[str, Head]:
        """The trained heads questions may name (:attr:`~logitjudge.engine.types.Question.head`)."""
        return self.readout.heads

    def set_heads(self, heads: dict[str, Head] | None) -> None:
        """Load trained heads (:mod:`logitjudge.engine.heads`) for questions that name them; the
        runner then taps their layers in every forward (``None`` or ``{}`` removes them).

        Raises:
            HeadMismatchError: a head was trained for another fingerprint or prompt version.
            UnsupportedModelError: a head reads a layer this model does not have.
        """
        heads = dict(heads or {})
        for head in heads.values():
            head.check(self.describe())
            bad = [x for x in head.layers if not 1 <= x <= self.runner.n_layers]
            if bad:
                raise UnsupportedModelError(
                    f"head {head.name!r} reads layers {bad}; this model has 1..{self.runner.n_layers}"
                )
        taps = tuple(sorted({x for head in heads.values() for x in head.layers}))
        self.readout.heads, self.readout.taps, self.runner.taps = heads, taps, taps

    @property
    def adapters(self) -> dict[str, BranchAdapter]:
        """The branch adapters questions may name (:attr:`~logitjudge.engine.types.Question.adapter`)."""
        return dict(self._adapters)

    def set_adapters(self, adapters: Sequence[BranchAdapter] | None) -> None:
        """Install branch adapters (:mod:`logitjudge.engine.adapters`) for questions that name
        them (``None`` or empty removes them). Installed adapters add nothing to a forward whose
        tokens none of them runs; the state cache is kept (states never run an adapter).

        Raises:
            AdapterError: one is bound to another fingerprint or prompt version.
            InvalidRequestError: two share a name.
        """
        adapters = list(adapters or ())
        names = [a.name for a in adapters]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"adapters: two adapters share a name ({names})", field=("adapters",))
        for adapter in adapters:
            adapter.check(self.describe())
        self.runner.adapters.install(adapters, device=self.lm.device, dtype=self.lm.dtype)
        self._adapters = {a.name: a for a in adapters}

    def load_adapters(self, folders: Sequence[Any]) -> None:
        """Read adapter folders (:func:`~logitjudge.engine.adapters.load_adapter`) and install them.

        Raises:
            AdapterError: see :func:`~logitjudge.engine.adapters.load_adapter` and :meth:`set_adapters`.
        """
        from logitjudge.engine.adapters import load_adapter

        self.set_adapters([load_adapter(f, self.lm.model) for f in folders])

    # -- planning ----------------------------------------------------------------------------

    def plan(self, request: EngineRequest) -> RequestPlan:
        """Validate and tokenize a request.

        Raises:
            InvalidRequestError: empty state, no questions, an option count out of range.
            ContextOverflowError: state + longest question > ``max_state_tokens``, or the whole
                request > ``max_request_tokens`` (the message names the part and the counts).
        """
        if not render_text(request.state).strip():
            raise InvalidRequestError("state: must not be empty", field=("state",))
        if not request.questions:
            raise InvalidRequestError("questions: at least one question is required", field=("questions",))
        specs = []
        for i, q in enumerate(request.questions):  # the first bad question is the one reported
            specs.append(question_type(q.type, i))
            specs[-1].check(q, i)
        prefix_ids = self.prompt.prefix_ids(request.state)
        prefix = tuple(prefix_ids)
        questions = []
        for i, (q, spec) in enumerate(zip(request.questions, specs)):
            if q.head is not None:
                check_head(self.heads, q, i)
            if q.adapter is not None:
                check_adapter(self._adapters, q, i)
            views = self.prompt.views(q, request.state, prefix_ids)
            questions.append(
                QuestionPlan(
                    q.type,
                    views,
                    len(q.options),
                    q.calibrated and spec.calibrated and q.adapter is None,  # fitted on the base readout
                    self.prompt.temperature(q.type),
                    head=q.head,
                    option_names=tuple(str(o.name) for o in q.options),
                    adapter=-1 if q.adapter is None else self.runner.adapters.slot(q.adapter),
                )
            )
        plan = RequestPlan(prefix, tuple(questions))
        longest = max(len(v.branch) + max(len(lab) for lab in v.labels) - 1 for q in questions for v in q.views)
        if len(prefix) + longest > self.max_state_tokens:
            raise ContextOverflowError(
                f"state + longest question is {len(prefix) + longest} tokens (state {len(prefix)}, "
                f"question {longest}); the limit is {self.max_state_tokens}",
                part="state + longest question",
                tokens=len(prefix) + longest,
                limit=self.max_state_tokens,
                field=("state",),
            )
        if plan.n_tokens > self.max_request_tokens:
            raise ContextOverflowError(
                f"request is {plan.n_tokens} tokens (state once plus all questions); "
                f"the limit is {self.max_request_tokens}",
                part="request total",
                tokens=plan.n_tokens,
                limit=self.max_request_tokens,
                field=("questions",),
            )
        return plan

    def count_tokens(self, request: EngineRequest) -> int:
        """Tokens a request will run (raises like :meth:`plan`)."""
        return self.plan(request).n_tokens

    # -- running -----------------------------------------------------------------------------

    @torch.inference_mode()
    def run_plans(self, plans: Sequence[RequestPlan], strategy: str | None = None) -> list[EngineResult]:
        """Answer planned requests in one batch with ``strategy`` (default: the engine's)."""
        plans = list(plans)
        if not plans:
            return []
        scores, labels, tapped = self.read(plans, strategy)  # (N_labels,), (R, K * H) or None
        # final = calibrated where the readout has a calibration; every answer field derives from it
        dists = self.readout.final_distributions(scores, labels, plans)
        by_head = self.readout.head_distributions(tapped, labels, plans)
        results = []
        for r, plan in enumerate(plans):
            answers = tuple(_answer(qp, dists[(r, q)], by_head.get((r, q))) for q, qp in enumerate(plan.questions))
            results.append(EngineResult(answers, Usage(input_tokens=plan.n_tokens)))
        return results

    def read(
        self, plans: Sequence[RequestPlan], strategy: str | None = None
    ) -> tuple[torch.Tensor, list[LabelTerm], torch.Tensor | None]:
        """The backend stage: (N_labels,) fp32 ``log p(label | prompt)`` of every label of every
        view, the labels (``pack.add_request`` order per request), and the tapped layers' states
        per read position ((R, K * H), ``None`` without heads). Here: our runner on the
        transformers model with ``strategy``, then the LM head's label rows
        (:meth:`Readout.log_probs`); the vLLM engine overrides only this
        (:class:`~logitjudge.engine.vllm_engine.VllmEngine`)."""
        reads = self.runner.run(list(plans), strategy or self.strategy)
        self.path_counts.update(reads.paths)
        scores = self.readout.log_probs(reads.hidden, reads.labels)
        width = self.readout.weight.shape[1] if self.readout.weight is not None else reads.hidden.shape[1]
        tapped = reads.hidden[:, width:] if self.runner.taps else None
        return scores, reads.labels, tapped

    @torch.inference_mode()
    def answer_states(
        self, requests: Sequence[EngineRequest], layers: Sequence[int]
    ) -> list[tuple[torch.Tensor, list[list[float]]]]:
        """The states trained heads read, for fitting them: per request, per question, the
        hidden states of ``layers`` at the question's answer position, in one pass per batch
        (the engine's strategy, as in serving).

        Args:
            requests: the requests (questions need no head).
            layers: layers 1..N (N: the final state after the last norm, see :mod:`logitjudge.engine.heads`).

        Returns:
            per request: a (Q, K, H) fp32 tensor (Q its questions, K = ``len(layers)``), and each
            question's label readout (its zero-shot answer, option order, uncalibrated).

        Raises:
            like :meth:`plan`; UnsupportedModelError: a layer out of range.
        """
        bad = [x for x in layers if not 1 <= x <= self.runner.n_layers]
        if bad:
            raise UnsupportedModelError(f"layers {bad} are not in 1..{self.runner.n_layers}")
        plans = [self.plan(r) for r in requests]
        saved = self.runner.taps
        self.runner.taps = tuple(layers)
        try:
            reads = self.runner.run(plans, self.strategy)
        finally:
            self.runner.taps = saved
        self.path_counts.update(reads.paths)
        width = reads.hidden.shape[1] // (1 + len(layers))
        scores = self.readout.log_probs(reads.hidden, reads.labels)
        n_options = {(r, q): qp.n_options for r, p in enumerate(plans) for q, qp in enumerate(p.questions)}
        dists = distributions(scores, reads.labels, n_options)
        first: dict[tuple[int, int], int] = {}
        for t in reads.labels:
            if t.view == 0:
                first.setdefault((t.request, t.question), t.terms[0][0])
        out = []
        for r, plan in enumerate(plans):
            rows = torch.tensor([first[(r, q)] for q in range(len(plan.questions))], device=reads.hidden.device)
            states = reads.hidden[rows, width:].float().reshape(len(rows), len(layers), width)
            out.append((states.cpu(), [dists[(r, q)].probabilities for q in range(len(plan.questions))]))
        return out

    def label_log_probs(
        self, plans: Sequence[RequestPlan], strategy: str | None = None
    ) -> tuple[torch.Tensor, list[LabelTerm]]:
        """:meth:`read` without the tapped states."""
        scores, labels, _ = self.read(plans, strategy)
        return scores, labels

    def planned_tokens(self, requests: Sequence[EngineRequest]) -> int:
        """Tokens the forward passes of ``requests`` will hold: each plan's
        :attr:`RequestPlan.n_tokens` (state plus every view of every question), less the state
        where the state cache holds it and the strategy reads it from there. A request that
        would fail counts 0. What a progress bar measures a call's :meth:`counting_tokens`
        against; requests sharing a state that is not cached yet count it once each, though it
        runs once."""
        reuses_cache = self.strategy in ("auto", "prefix_packed", "prefix_rows")
        total = 0
        for req in requests:
            try:
                plan = self.plan(req)
            except LogitJudgeError:  # the request's own error comes back from run_batch
                continue
            total += plan.n_tokens - (len(plan.prefix) if reuses_cache and self.runner.cached(plan) else 0)
        return total

    @contextmanager
    def counting_tokens(self, callback: Callable[[int], None]) -> Iterator[bool]:
        """While open, ``callback(tokens)`` as forward passes move through the model, layer by
        layer (:meth:`Runner.counting_tokens <logitjudge.engine.runner.Runner.counting_tokens>`).
        Yields True: this backend reports tokens while a call runs."""
        with self.runner.counting_tokens(callback):
            yield True

    def counters(self) -> dict[str, Any]:
        """Cumulative counters for ``/metrics`` (plain numbers): forwards per runner path
        (``paths``, e.g. ``{"prefix_packed:dense": 12, "prefix_packed:cached": 30}``) and the
        state cache's :class:`~logitjudge.engine.state_cache.StateCacheStats` (``state_cache``)."""
        return {"paths": dict(self.path_counts), "state_cache": dataclasses.asdict(self.state_cache.stats())}

    def close(self) -> None:
        """Release the backend's resources (the state cache's KV here)."""
        self.state_cache.clear()

    def run_batch(
        self, requests: Sequence[EngineRequest], strategy: str | None = None
    ) -> list[EngineResult | LogitJudgeError]:
        """Answer several requests; a request's own error is returned in its place."""
        out: list[EngineResult | LogitJudgeError] = []
        plans: list[tuple[int, RequestPlan]] = []
        for i, req in enumerate(requests):
            try:
                plans.append((i, self.plan(req)))
                out.append(None)  # type: ignore[arg-type]
            except LogitJudgeError as exc:
                out.append(exc)
        for (i, _), res in zip(plans, self.run_plans([p for _, p in plans], strategy)):
            out[i] = res
        return out

    def self_check(self, request: EngineRequest = SELF_CHECK_REQUEST) -> float:
        """Compare the engine's strategy with separate passes; return the max |dp|.

        With ``auto``, every strategy it may choose is compared (``packed``, ``prefix_packed``
        where allowed, and ``prefix_packed`` again from the state cache's entry when on).

        Raises:
            EngineDeadError: the difference exceeds :func:`tolerance_for` the model's dtype.
        """
        plan = self.plan(request)
        ref = self.run_plans([plan], "separate")[0]
        if self.strategy != "auto":
            checks = [self.strategy]
        else:
            checks = [s for s in ("packed", "prefix_packed") if self.runner.allows(s)] or ["prefix_rows"]
            checks += ["prefix_packed"] if self.runner.state_cache is not None and "prefix_packed" in checks else []
        diff = 0.0
        for strategy in checks:
            got = self.run_plans([plan], strategy)[0]
            d = max(
                abs(a - b) for x, y in zip(got.answers, ref.answers) for a, b in zip(x.probabilities, y.probabilities)
            )
            tol = tolerance_for(self.lm.dtype)
            if d > tol:
                raise EngineDeadError(
                    f"self-check failed: strategy {strategy!r} differs from separate passes by "
                    f"{d:.2e} (tolerance {tol:.0e}) on {self.lm.device}; refusing to serve"
                )
            diff = max(diff, d)
        if self.runner.state_cache is not None:
            self.state_cache.clear()  # the self-check's state is nobody's
        logger.info("self-check: %s vs separate passes, max |dp| = %.2e", "/".join(checks), diff)
        return diff


def _answer(qp: QuestionPlan, dist: Distribution, head: list[float] | None = None) -> Answer:
    """One question's :class:`Answer` from its final distribution (``readout.distributions``),
    or from its head's (``readout.head_distributions``), the label distribution kept beside it."""
    probs = tuple(dist.probabilities)
    if head is not None:
        return Answer(qp.type, tuple(head), dist.option_mass, label_probabilities=probs)
    if not question_type(qp.type).likelihood:
        return Answer(qp.type, probs, dist.option_mass)
    n = len(qp.views[0].labels[0])
    return Answer(qp.type, probs, dist.option_mass, log_likelihood=dist.log_mass, tokens=n)
