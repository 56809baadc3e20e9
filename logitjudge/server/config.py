"""The server's typed config: one set of defaults for ``create_app`` and ``logitjudge serve``.

:class:`ServerConfig` extends the scheduler's :class:`~logitjudge.engine.config.SchedulerConfig`
(queue and batching) with the server's own switches: API keys, body size, drain timeout, the
per-request limits of :class:`~logitjudge.server.limits.RequestLimits` and the strict wire. ``create_app``'s keyword
defaults and the ``serve`` flags' defaults and help are read from here, so each default is
written once (``tests/engine/test_config.py`` checks the flags).

The batching defaults depend on the device (:func:`~logitjudge.server.app.default_batching`):
:data:`ACCELERATOR_BATCHING` is the scheduler's own default, :data:`CPU_BATCHING` the CPU's.

This module imports no fastapi and no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from logitjudge.engine.config import SchedulerConfig
from logitjudge.server.limits import RequestLimits

__all__ = ["ServerConfig", "CPU_BATCHING", "ACCELERATOR_BATCHING"]

CPU_BATCHING = (4096, 16)
"""Default (max_num_batched_tokens, max_batch_requests) on a CPU.

History: the first packed runner put a whole batch in one row, whose dense mask and attention
grow with the square of the batch, and batching lost on CPU (runner 0.49 s/request alone vs
0.62 s/request in batches of 8). The runner now gives each request its own row of a padded batch:
8 requests of ~206 tokens ran 2.72 s/request batched vs 5.61 s/request one at a time on 2 shared
CPU cores (interleaved medians, /tmp/batchb-style micro-benchmark; see
``benchmarks/results/serve_load.json`` for the server-level figures)."""

ACCELERATOR_BATCHING = (SchedulerConfig.max_num_batched_tokens, SchedulerConfig.max_batch_requests)
"""Default (max_num_batched_tokens, max_batch_requests) on a GPU (the scheduler's defaults), where one
request leaves the device mostly idle and a shared forward pass is nearly free up to thousands of
tokens."""


@dataclass(frozen=True)
class ServerConfig(SchedulerConfig):
    """Limits and switches of one server (the scheduler's fields, ``max_queue``,
    ``max_num_batched_tokens`` and ``max_batch_requests``, are documented on :class:`SchedulerConfig`).

    Out-of-range values are refused with ``ValueError`` at construction.
    """

    api_keys: tuple[str, ...] = ()
    """Accepted API keys; empty = auth off (an ``Authorization`` header is then ignored). Keys are
    non-empty and hold no whitespace."""

    max_body_bytes: int = 16 * 1024 * 1024
    """Largest request body, after zstd decoding; larger gets 413. At least 1 KiB."""

    drain_timeout: float = 60.0
    """Seconds a shutdown (SIGTERM, Ctrl-C) waits for accepted requests before refusing the rest."""

    max_questions: int = RequestLimits.max_questions
    """Questions per System One request (and per evaluate item); more gets 422 (see
    :class:`~logitjudge.server.limits.RequestLimits`)."""

    max_items: int = RequestLimits.max_items
    """Items per ``POST /api/v1/evaluate`` batch; more gets 422."""

    max_text_chars: int = RequestLimits.max_text_chars
    """Characters in any one string of a request; more gets 422."""

    strict_wire: bool = False
    """Answer without any ``x_`` extension field (``x_option_mass``, ...), for clients that validate
    responses against a closed schema; a request's ``x_strict_wire`` overrides it either way."""

    @property
    def limits(self) -> RequestLimits:
        """The per-request limits checked after validation (questions, items, string length)."""
        return RequestLimits(self.max_questions, self.max_items, self.max_text_chars)

    def __post_init__(self) -> None:
        RequestLimits(self.max_questions, self.max_items, self.max_text_chars)  # raises when out of range
        super().__post_init__()
        if self.max_body_bytes < 1024:
            raise ValueError("max_body_bytes must be at least 1024")
        if any(not k or any(c.isspace() for c in k) for k in self.api_keys):
            raise ValueError("API keys must be non-empty and contain no whitespace")
