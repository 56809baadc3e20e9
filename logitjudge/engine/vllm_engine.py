"""The engine on the vLLM backend: our prompt, plan, readout and answers; vLLM's forward.

::

    engine = load_engine(None, EngineConfig(backend="vllm"))          # or Judge.load(backend="vllm")
    engine = VllmEngine.load("/models/judge-70b", EngineConfig(backend="vllm", vllm=VllmConfig(tensor_parallel_size=4)))

:class:`VllmEngine` is an :class:`~logitjudge.engine.core.Engine` whose backend stage
(:meth:`label_log_probs`) is :class:`~logitjudge.engine.vllm_backend.VllmBackend`; ``plan`` (the
same token ids and labels as on transformers, the same 413 budgets), the readout's softmax over
labels, view averaging, calibration and the answers are the base class's. No transformers model
is loaded in this process (only the tokenizer and the config): the weights live in vLLM's
workers, on as many devices as its parallel sizes say.

Isolation holds by construction: every question view is its own vLLM sequence; the prefix cache
only shares the state's KV blocks, which a question cannot change. The start-up self-check
measures that: each question of :data:`~logitjudge.engine.core.SELF_CHECK_REQUEST` answered
alone (cache cold, then warm) must equal it answered with its siblings within
:func:`~logitjudge.engine.core.tolerance_for` the dtype.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from logitjudge.engine.config import EngineConfig
from logitjudge.engine.core import SELF_CHECK_REQUEST, Engine, tolerance_for
from logitjudge.engine.decision import question_prompt
from logitjudge.engine.model import (
    config_identity,
    resolve_device,
    resolve_dtype,
    resolve_model,
)
from logitjudge.engine.pack import LabelTerm, RequestPlan
from logitjudge.engine.precision import cpu_has_native_bf16
from logitjudge.engine.prompt import QuestionPrompt
from logitjudge.engine.readout import Readout
from logitjudge.engine.types import EngineRequest
from logitjudge.engine.vllm_backend import VllmBackend
from logitjudge.errors import EngineDeadError, InvalidRequestError, UnsupportedModelError

__all__ = ["VllmEngine", "files_fingerprint"]

logger = logging.getLogger("logitjudge.engine")


def files_fingerprint(model_dir: Path) -> str:
    """sha256 over ``config.json`` and every safetensors tensor's name, shape and stored dtype.

    The transformers backend fingerprints the loaded module instead (``weights_fingerprint``);
    the two differ, so a calibration fitted on one backend is refused on the other (its
    ``strategy`` differs too).
    """
    from safetensors import safe_open

    h = hashlib.sha256(b"vllm:")
    config = model_dir / "config.json"
    if config.exists():
        h.update(config_identity(json.loads(config.read_text())).encode())
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in sorted(f.keys()):
                part = f.get_slice(name)
                h.update(f"{name}:{tuple(part.get_shape())}:{part.get_dtype()}".encode())
    return h.hexdigest()


class VllmEngine(Engine):
    """An :class:`Engine` whose forward passes run in vLLM.

    Args:
        backend: the started vLLM backend.
        tokenizer: the model's tokenizer (the prompt builder's; vLLM gets token ids only).
        hf_config: the model's transformers config (context length).
        name, source, fingerprint: as in ``LoadedModel``.
        device, dtype: where and in what vLLM runs.
        config: the engine configuration (its ``vllm`` part started ``backend``).
        prompt: the prompt builder (default: :func:`~logitjudge.engine.decision.question_prompt` of
            ``source``); :meth:`load` passes the one it built before starting vLLM.
    """

    def __init__(
        self,
        backend: VllmBackend,
        tokenizer: Any,
        *,
        name: str,
        source: str,
        fingerprint: str,
        device: torch.device,
        dtype: torch.dtype,
        config: EngineConfig,
        prompt: QuestionPrompt | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.name = name
        self.source = source
        self.fingerprint = fingerprint
        self.device = device
        self.dtype = dtype
        self.prompt = prompt or question_prompt(source, tokenizer, config.prompt_version)
        self.strategy = "vllm"
        self.attn = "vllm"
        self.mask_ignoring = False  # each view is its own vLLM sequence: nothing relies on masks
        # vLLM samples one token after the longest prompt we send: the budget is one below its context
        self.max_state_tokens = min(config.max_state_tokens, backend.max_model_len - 1)
        self.max_request_tokens = config.max_request_tokens
        self.readout = Readout(None)  # softmax over labels, views, calibration: ours
        self._plan_lock = threading.Lock()  # one tokenizer, called from several scheduler threads

    @classmethod
    def load(cls, model: str | None = None, config: EngineConfig | None = None, **options: Any) -> VllmEngine:
        """Start vLLM on ``model`` (see :func:`~logitjudge.engine.model.resolve_model`) and self-check it.

        ``config.device`` and ``config.dtype`` resolve as on transformers (fp32 on CPU, bf16 on
        CUDA); ``config.vllm`` is handed to vLLM. ``strategy``, ``attn`` and the row budgets
        are the transformers backend's and are not used.

        Raises:
            UnsupportedModelError: vLLM is missing or cannot load the model, or the model
                directory's decision template cannot be rendered here (before vLLM starts).
            EngineDeadError: the self-check failed.
        """
        from transformers import AutoConfig, AutoTokenizer

        config = (config or EngineConfig(backend="vllm")).with_options(**options)
        t0 = time.perf_counter()
        path, name = resolve_model(model)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
            hf_config = AutoConfig.from_pretrained(str(path))
        except (OSError, ValueError) as exc:
            raise UnsupportedModelError(f"cannot load model {model!r}: {exc}") from exc
        # refused here, before vLLM starts (vLLM scores label tokens: a decision head has no place there)
        prompt = question_prompt(str(path), tokenizer, config.prompt_version, decision_heads=False)
        device = resolve_device(config.device)
        dtype = resolve_dtype(config.dtype, device)
        context = int(getattr(hf_config, "max_position_embeddings", None) or config.max_state_tokens + 1)
        max_model_len = config.vllm.max_model_len or min(context, config.max_state_tokens + 1)
        backend = VllmBackend(
            path,
            config.vllm,
            dtype=str(dtype).removeprefix("torch."),
            max_model_len=max_model_len,
            device=device.type,
        )
        try:
            engine = cls(
                backend,
                tokenizer,
                name=name,
                source=str(path),
                fingerprint=files_fingerprint(path),
                device=device,
                dtype=dtype,
                config=config,
                prompt=prompt,
            )
            logger.info("vLLM serving %s on %s (%s) in %.1f s", name, device, dtype, time.perf_counter() - t0)
            if config.self_check:
                engine.self_check()
        except BaseException:
            backend.close()  # vLLM's engine process does not outlive a failed load
            raise
        return engine

    def describe(self) -> dict[str, Any]:
        """As :meth:`Engine.describe`, with ``backend`` ``"vllm"``, the vLLM options and
        ``max_model_len``; ``strategy`` and ``attn`` are ``"vllm"``."""
        return {
            "model": self.name,
            "backend": "vllm",
            "source": self.source,
            "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""),
            "precision": str(self.dtype).replace("torch.", ""),
            "state_dtype": str(self.dtype).replace("torch.", ""),
            "cpu_native_bf16": cpu_has_native_bf16(),
            "strategy": self.strategy,
            "attn": self.attn,
            "prompt_version": self.prompt.version,
            "fingerprint": self.fingerprint,
            "calibration": self.calibration.digest if self.calibration is not None else None,
            "calibration_origin": self.calibration.origin if self.calibration is not None else None,
            "heads": [],  # vLLM returns no hidden states: no trained heads
            "head_evaluators": {},
            "adapters": [],  # vLLM has no activated LoRA: no branch adapters
            "adapter_evaluators": {},
            "max_state_tokens": self.max_state_tokens,
            "max_request_tokens": self.max_request_tokens,
            "max_model_len": self.backend.max_model_len,
            "vllm": dataclasses.asdict(self.config.vllm),
        }

    def plan(self, request: EngineRequest) -> RequestPlan:
        """As :meth:`Engine.plan` (same token ids, same typed errors), one caller at a time.

        Raises:
            InvalidRequestError: also for a question that names a branch adapter (``questions[i].adapter``):
                vLLM has no activated LoRA, and answering without the adapter would be another question.
        """
        for i, q in enumerate(request.questions):
            if q.adapter is not None:
                raise InvalidRequestError(
                    f"questions[{i}].adapter: the vllm backend runs no branch adapters (vLLM has no activated "
                    f"LoRA); serve {q.adapter!r} with --backend transformers",
                    field=("questions", i, "adapter"),
                )
        with self._plan_lock:
            return super().plan(request)

    def read(
        self, plans: Sequence[RequestPlan], strategy: str | None = None
    ) -> tuple[torch.Tensor, list[LabelTerm], torch.Tensor | None]:
        """vLLM's log-probs of every label (:meth:`VllmBackend.label_log_probs`), no tapped states
        (vLLM returns no hidden states: trained heads need the transformers backend); ``strategy``
        must be ``None`` or ``"vllm"`` (vLLM has one way to run)."""
        if strategy not in (None, "vllm"):
            raise UnsupportedModelError(f"the vllm backend has no strategy {strategy!r}")
        scores, labels = self.backend.label_log_probs(plans)
        return scores, labels, None

    def set_heads(self, heads: Any) -> None:
        """Trained heads read hidden states, which vLLM does not return.

        Raises:
            UnsupportedModelError: ``heads`` is not empty.
        """
        if heads:
            raise UnsupportedModelError("trained heads need the transformers backend (vLLM returns no hidden states)")

    def load_adapters(self, folders: Any) -> None:
        """Refused like :meth:`set_adapters` (raises UnsupportedModelError when ``folders`` is not empty)."""
        self.set_adapters(folders)

    def set_adapters(self, adapters: Any) -> None:
        """Branch adapters need the transformers backend: vLLM has no activated LoRA.

        Raises:
            UnsupportedModelError: ``adapters`` is not empty.
        """
        if adapters:
            raise UnsupportedModelError("branch adapters need the transformers backend (vLLM has no activated LoRA)")

    def self_check(self, request: EngineRequest = SELF_CHECK_REQUEST) -> float:
        """Each question alone vs with its siblings (after the state is cached); return max |dp|.

        Raises:
            EngineDeadError: over :func:`tolerance_for` the dtype.
        """
        plan = self.plan(request)
        together = self.run_plans([plan])[0]
        diff = 0.0
        for i, question in enumerate(plan.questions):
            alone = self.run_plans([RequestPlan(plan.prefix, (question,))])[0].answers[0]
            diff = max(diff, *(abs(a - b) for a, b in zip(alone.probabilities, together.answers[i].probabilities)))
        tol = tolerance_for(self.dtype)
        if diff > tol:
            raise EngineDeadError(
                f"self-check failed: vLLM answers a question differently with its siblings ({diff:.2e}, "
                f"tolerance {tol:.0e}) on {self.device}; refusing to serve"
            )
        logger.info("self-check: vLLM alone vs with siblings, max |dp| = %.2e", diff)
        return diff

    @contextmanager
    def counting_tokens(self, callback: Callable[[int], None]) -> Iterator[bool]:
        """Yields False: vLLM runs its forward passes in its own engine, out of reach of hooks
        (``callback`` is never called; a progress bar moves as calls return)."""
        yield False

    def counters(self) -> dict[str, Any]:
        """No runner paths or state cache here: vLLM's prefix cache holds states across requests
        (its counters: ``VllmBackend.counters``)."""
        return {"paths": {}, "state_cache": None, "vllm": self.backend.counters()}

    def close(self) -> None:
        """Stop vLLM's engine processes."""
        self.backend.close()
