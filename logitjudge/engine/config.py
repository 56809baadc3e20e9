"""Typed configs of the engine and its scheduler: one set of defaults, a docstring per field.

::

    from logitjudge.engine.config import EngineConfig
    config = EngineConfig(strategy="prefix_rows", max_row_tokens=4096)   # refused if out of range
    engine = Engine.load(None, config)                                   # or Judge.load(max_row_tokens=4096)

Every default is written here once and read by whoever needs it: :class:`EngineConfig` by
``Engine``, ``Judge.load`` and the CLI's model flags (``--device`` ... ``--engine-row-tokens``);
:class:`SchedulerConfig` by ``Scheduler``, the server's ``ServerConfig`` (which extends it),
``create_app`` and ``logitjudge serve``. ``tests/engine/test_config.py`` checks that they agree.

Two token budgets, two names:

- :attr:`EngineConfig.max_row_tokens`: the most tokens one packed forward row holds *inside* an
  engine call (the CLI's ``--engine-row-tokens``; ``describe()["max_row_tokens"]``).
- :attr:`SchedulerConfig.max_num_batched_tokens`: the scheduler's estimated-token budget of one engine
  call *across* requests (``logitjudge serve --max-num-batched-tokens``).

This module imports no torch (the CLI reads it to build its flags).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from logitjudge.errors import ConfigurationError

__all__ = [
    "EngineConfig",
    "SchedulerConfig",
    "VllmConfig",
    "STRATEGIES",
    "ATTN_CHOICES",
    "DTYPE_CHOICES",
    "BACKENDS",
    "SYSTEMONE_ROTATIONS",
    "EVALUATOR_ROTATIONS",
]

STRATEGIES = ("packed", "prefix_packed", "prefix_rows", "separate")
"""The runner's strategies (``logitjudge.engine.runner``); ``auto`` picks one per model."""

ATTN_CHOICES = ("auto", "eager", "sdpa", "flex_attention")
DTYPE_CHOICES = ("auto", "mixed", "float32", "bfloat16", "float16")
"""The ``dtype`` values (``fp32``, ``bf16`` and ``fp16`` are accepted as aliases)."""
_DTYPE_ALIASES = ("fp32", "bf16", "fp16")
"""Attention implementations the engine can run (``logitjudge.engine.attention.resolve_attn``)."""

PROMPT_VERSIONS = ("lj-prompt-1.1", "lj-prompt-2")
"""The selectable prompt templates (``logitjudge.engine.prompt.TEMPLATES`` has their words)."""

SYSTEMONE_ROTATIONS = 8
"""Option-order rotations of a System One choice or score question when neither the request
(``x_rotations``) nor the server (``--rotations``, ``Judge.load(default_rotations=...)``) says. The
engine caps rotations at a question's option count, so a question of up to 8 options or levels is
asked in every cyclic rotation of its order, as branches over the one state prefix, and the
distributions are averaged. A choice's rotations are those of a canonical order (by description,
then name; :meth:`~logitjudge.engine.question_types.QuestionTypeDef.display_order`), so its answer
is the same for every order of the request's options, and for up to 8 options the label and
position prior is averaged out (a longer menu gets 8 rotations). Chosen by
``benchmarks/studies/coherence.py`` (coherence, accuracy and tokens of rotations, a per-request
prior correction and a letter-free readout, side by side;
``benchmarks/results/coherence-smollm2-135m-instruct.md``). ``1`` restores the single order."""

EVALUATOR_ROTATIONS = 1
"""Option-order rotations of the evaluators' choice and score questions (``POST /api/v1/evaluate``,
``logitjudge evaluate``) when the server or CLI does not say: their thresholds, shipped
calibrations and fitted coefficients were measured on single-order answers, so they stay there
unless ``--rotations`` asks otherwise."""

BACKENDS = ("transformers", "vllm")
"""What turns token-id prompts into label log-probs: our runner on a transformers model, or vLLM
(``logitjudge.engine.vllm_backend``). Prompt, labels, readout maths, calibration and answers are
ours on both."""

DISTRIBUTED_EXECUTORS = ("mp", "ray", "uni")
"""vLLM's distributed executors: ``mp`` (processes on one machine), ``ray`` (several machines),
``uni`` (one process)."""


@dataclass(frozen=True)
class VllmConfig:
    """Options handed to vLLM's engine when ``EngineConfig.backend == "vllm"`` (ignored otherwise).

    Each field is the vLLM engine argument of the same name unless it says otherwise; ``None``
    leaves vLLM's own default. Strict like :class:`EngineConfig`: out-of-range values raise
    ``ValueError``, an unknown executor :class:`~logitjudge.errors.ConfigurationError`.
    """

    tensor_parallel_size: int = 1
    """GPUs each layer is split over (vLLM ``tensor_parallel_size``)."""

    pipeline_parallel_size: int = 1
    """Pipeline stages (vLLM ``pipeline_parallel_size``); with ``ray``, stages may be on other machines."""

    data_parallel_size: int = 1
    """Engine replicas inside vLLM (vLLM ``data_parallel_size``)."""

    distributed_executor_backend: str | None = None
    """One of :data:`DISTRIBUTED_EXECUTORS`, or ``None`` (vLLM picks: ``mp`` on one machine).
    ``ray`` is the multi-node executor (a Ray cluster started beforehand)."""

    block_size: int = 32
    """Tokens per KV-cache block, the unit of prefix caching. 32 rather than vLLM's CPU default
    of 128: only whole blocks of the shared state are reused, so smaller blocks leave fewer state
    tokens to recompute per question (measured here: ``benchmarks/results/speed-vllm-cpu.md``).
    vLLM's CPU build takes multiples of 32 only."""

    kv_cache_gib: int | None = None
    """KV cache size in whole GiB. On CPU this sets ``VLLM_CPU_KVCACHE_SPACE`` for the engine processes
    (vLLM's default there is 4 GiB); on GPU vLLM's ``kv_cache_memory_bytes`` (overrides
    ``gpu_memory_utilization``'s sizing of the cache)."""

    gpu_memory_utilization: float | None = None
    """Share of each GPU's memory vLLM may use (vLLM default 0.9)."""

    max_model_len: int | None = None
    """vLLM's context length; ``None`` = the model's context, capped at
    ``EngineConfig.max_state_tokens + 1`` (the longest prompt we send plus the one token vLLM
    samples). The 413 limit stays ours: ``max_state_tokens`` is capped at ``max_model_len - 1``."""

    enforce_eager: bool = True
    """No CUDA graphs / torch.compile (start-up ~30-45 s on 2 CPU cores instead of ~90-110 s)."""

    def __post_init__(self) -> None:
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"vllm.{name} must be >= 1, got {getattr(self, name)}")
        if self.distributed_executor_backend not in (None, *DISTRIBUTED_EXECUTORS):
            raise ConfigurationError(
                f"unknown vLLM executor {self.distributed_executor_backend!r}; one of {DISTRIBUTED_EXECUTORS}",
                field=("vllm", "distributed_executor_backend"),
            )
        if self.kv_cache_gib is not None and self.kv_cache_gib <= 0:
            raise ValueError(f"vllm.kv_cache_gib must be > 0, got {self.kv_cache_gib}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"vllm.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"vllm.max_model_len must be >= 2, got {self.max_model_len}")


@dataclass(frozen=True)
class EngineConfig:
    """How the engine loads its model, runs it, and what one request may hold.

    Strict: an unknown strategy, attention, backend or prompt version is refused with
    :class:`~logitjudge.errors.ConfigurationError` (``field`` names it), a budget below 1 with
    ``ValueError``, an unknown field (:meth:`with_options`) with ``TypeError``.
    """

    device: str = "auto"
    """``auto`` (CUDA when present, else CPU; several GPUs: accelerate's device map), ``cpu``,
    ``cuda``, ``cuda:N``. Used when loading; an engine built on a loaded model keeps its device."""

    dtype: str = "auto"
    """``auto``: bf16 on GPUs that have it, else fp16; on a CPU with native bf16 (AVX512-BF16 or
    AMX) ``mixed`` where it applies, else fp32. ``mixed``: fp32 weights, the state's forward in
    bf16, the questions and the readout in fp32, so isolation holds to 1e-4
    (:mod:`logitjudge.engine.precision`). ``float32`` (every forward in fp32: the bit-stable
    reference), ``bfloat16``, ``float16``. Used when loading, like ``device``."""

    strategy: str = "auto"
    """One of :data:`STRATEGIES` or ``auto``: chosen per request by the runner
    (:meth:`~logitjudge.engine.runner.Runner.choose`, the rule and its measurements there):
    ``prefix_rows`` where layers ignore masks; ``packed`` on FlexAttention; else
    ``prefix_packed``, or ``packed`` for sliding-window models. With a failed self-check ``auto``
    falls back to ``separate``."""

    attn: str = "auto"
    """One of :data:`ATTN_CHOICES`: ``auto`` = FlexAttention on CUDA where the model supports it,
    else the model's own implementation."""

    self_check: bool = True
    """Compare the strategy with separate passes at load, on the serving device and dtype, and
    refuse to serve on a mismatch (``EngineDeadError``)."""

    max_state_tokens: int = 32_768
    """Budget (tokens) for the state plus the longest question; capped by the model's own
    ``max_position_embeddings``. Over it: ``ContextOverflowError`` (413), never truncation."""

    max_request_tokens: int = 65_536
    """Budget (tokens) for one request: the state once plus every question branch."""

    max_row_tokens: int = 8192
    """The most tokens one packed forward row holds inside an engine call (several requests share
    a row up to this; a larger request runs alone). CLI: ``--engine-row-tokens``; reported as
    ``describe()["max_row_tokens"]``."""

    backend: str = "transformers"
    """One of :data:`BACKENDS`: ``transformers`` (our packing on a transformers model) or ``vllm``
    (paged KV cache with prefix caching, continuous batching, tensor/pipeline/data parallelism;
    ``pip`` extra, see the README). ``strategy``, ``attn`` and the row budgets are the
    transformers backend's; ``vllm`` holds vLLM's options."""

    vllm: VllmConfig = VllmConfig()
    """vLLM engine options (:class:`VllmConfig`), used when ``backend == "vllm"``."""

    prompt_version: str = "lj-prompt-1.1"
    """The prompt template (``logitjudge.engine.prompt.TEMPLATES``): ``lj-prompt-1.1`` (the
    default) or ``lj-prompt-2`` (the lean one: the same question and option lines, fewer
    instruction tokens; measured in ``benchmarks/results/``). CLI: ``--prompt-version``.
    Calibrations and state-cache entries are bound to it."""

    state_cache_mb: int = 1024
    """MiB of state-prefix KV kept across requests (:mod:`logitjudge.engine.state_cache`): a
    request over a state seen before skips its prefix forward. An LRU bounded in bytes, keyed by
    model fingerprint, dtype, prompt version and the state's token ids; 0 disables it. KV per
    state token in fp32: 45 KiB (SmolLM2-135M: 30 layers x 3 KV heads x 64), 56 KiB (Qwen2.5-1.5B: 28 x 2 x 128),
    so 1024 MiB holds about 23k / 18k state tokens. CLI: ``--state-cache-mb``. The transformers backend's (vLLM has its
    own prefix cache, in its KV cache)."""

    dense_mask_max_tokens: int = 4096
    """Rows longer than this never get a dense mask: 4096^2 x 4 B = 64 MiB per layer type in fp32
    (32 MiB in bf16) plus 16 MiB of bool temporaries, harmless on any device. Above it the runner
    uses FlexAttention where the model runs it, else the prefix cache + one row per question."""

    def __post_init__(self) -> None:
        if self.strategy != "auto" and self.strategy not in STRATEGIES:
            raise ConfigurationError(
                f"unknown strategy {self.strategy!r}; one of {STRATEGIES} or auto", field=("strategy",)
            )
        if self.attn not in ATTN_CHOICES:
            raise ConfigurationError(f"unknown attention {self.attn!r}; one of {ATTN_CHOICES}", field=("attn",))
        if self.dtype not in DTYPE_CHOICES + _DTYPE_ALIASES:
            raise ConfigurationError(
                f"unknown dtype {self.dtype!r}: use auto, mixed, float32, bfloat16 or float16", field=("dtype",)
            )
        if self.dtype == "mixed" and self.backend != "transformers":
            raise ConfigurationError(
                "dtype mixed runs on the transformers backend; vLLM serves auto, float32 or bfloat16", field=("dtype",)
            )
        if self.dtype == "mixed" and self.strategy == "packed":
            raise ConfigurationError(
                "dtype mixed runs the state in its own forward; strategy packed runs it with the questions: "
                "use auto, prefix_packed, prefix_rows or separate",
                field=("dtype",),
            )
        if self.backend not in BACKENDS:
            raise ConfigurationError(f"unknown backend {self.backend!r}; one of {BACKENDS}", field=("backend",))
        for name in ("max_state_tokens", "max_request_tokens", "max_row_tokens", "dense_mask_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.prompt_version not in PROMPT_VERSIONS:
            raise ConfigurationError(
                f"unknown prompt version {self.prompt_version!r}; one of {PROMPT_VERSIONS}", field=("prompt_version",)
            )
        if self.state_cache_mb < 0:
            raise ValueError(f"state_cache_mb must be >= 0, got {self.state_cache_mb}")

    def with_options(self, **options: Any) -> EngineConfig:
        """A copy with ``options`` replacing fields; an option that is ``None`` keeps the field.

        Raises:
            TypeError: an unknown option.
        """
        return dataclasses.replace(self, **{k: v for k, v in options.items() if v is not None})


@dataclass(frozen=True)
class SchedulerConfig:
    """Queue and batching of the scheduler in front of the engine (``logitjudge.engine.scheduler``).

    ``max_concurrent_batches`` engine calls may run at once: 1 for the transformers backend (one
    forward at a time; the scheduler batches what waits), more for vLLM, which batches
    continuously itself (the server picks it from the judge's backend).

    The batching defaults are the accelerator's; on a CPU the server starts from
    ``logitjudge.server.config.CPU_BATCHING`` instead (see its docstring for the measurements).
    """

    max_queue: int = 256
    """Requests that may wait (not counting the running batch); more are refused at once with
    ``OverloadedError`` (529 + ``Retry-After``). At least 1."""

    max_num_batched_tokens: int = 16_384
    """Estimated-token budget of one engine call across requests (``estimate_tokens``; the first
    request of a batch always runs). At least 1. Not the engine's row budget
    (:attr:`EngineConfig.max_row_tokens`)."""

    max_batch_requests: int = 64
    """Most requests in one engine call; 1 = one request at a time. At least 1."""

    max_concurrent_batches: int = 1
    """Engine calls in flight at once, each in its own thread. 1 (the default) serialises them,
    right for the transformers backend; the vLLM backend takes many at once and batches them
    continuously (the server uses :data:`VLLM_CONCURRENT_BATCHES` there). At least 1."""

    def __post_init__(self) -> None:
        if min(self.max_queue, self.max_num_batched_tokens, self.max_batch_requests, self.max_concurrent_batches) < 1:
            raise ValueError(
                "max_queue, max_num_batched_tokens, max_batch_requests and max_concurrent_batches must be >= 1"
            )


VLLM_CONCURRENT_BATCHES = 64
"""``max_concurrent_batches`` of a server on the vLLM backend: vLLM schedules every request it
holds token by token (continuous batching), so the scheduler hands it what arrives at once."""
