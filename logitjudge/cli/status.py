"""Status lines on stderr while a model loads: each step with the seconds since the load began.

::

    logitjudge: [  0.0 s] locating the packaged model qwen2.5-coder-1.5b
    logitjudge: [  2.3 s] converting qwen2.5-coder-1.5b-instruct-q4_k_m.gguf to safetensors ... (once)
    logitjudge: [181.0 s] loading qwen2.5-coder-1.5b-instruct weights (float32) on cpu
    logitjudge: [186.4 s] qwen2.5-coder-1.5b-instruct loaded in 186.4 s; start-up self-check next
    logitjudge: [189.9 s] ready: qwen2.5-coder-1.5b-instruct (float32, cpu), loaded in 189.9 s

The steps are the INFO records of the ``logitjudge.status`` logger
(:data:`logitjudge.settings.STATUS_LOGGER`), which only the command line shows; a library
user sees them by configuring that logger.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from logitjudge.settings import STATUS_LOGGER

__all__ = ["load_status", "StatusHandler"]


class StatusHandler(logging.Handler):
    """Writes ``logitjudge: [  t s] message`` lines, ``t`` seconds since ``t0``."""

    def __init__(self, t0: float, stream: TextIO | None = None) -> None:
        super().__init__(logging.INFO)
        self.t0 = t0
        self.stream = stream

    def line(self, message: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(f"logitjudge: [{time.monotonic() - self.t0:6.1f} s] {message}\n")
        stream.flush()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.line(record.getMessage())
        except Exception:  # a status line must never break a load
            self.handleError(record)


@contextmanager
def load_status(enabled: bool = True) -> Iterator[StatusHandler | None]:
    """Show the load's steps on stderr while the block runs (nothing when not ``enabled``)."""
    if not enabled:
        yield None
        return
    log = logging.getLogger(STATUS_LOGGER)
    handler = StatusHandler(time.monotonic())
    old_level, old_propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # not twice under -v's root handler
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
        log.propagate = old_propagate
