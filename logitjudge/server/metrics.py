"""Prometheus metrics of one server, in its own registry (so tests can build many apps).

``GET /metrics`` serves them in the text exposition format. Names (counters get ``_total``):

- ``logitjudge_http_requests_total{route,method,status}``, ``logitjudge_http_request_duration_seconds{route}``
- ``logitjudge_questions_total{type}``, ``logitjudge_input_tokens_total``
- ``logitjudge_queue_depth`` (waiting requests), ``logitjudge_queue_wait_seconds``
- ``logitjudge_batch_size`` (requests per engine call), ``logitjudge_batch_tokens`` (estimated),
  ``logitjudge_batch_duration_seconds``
- ``logitjudge_rejected_requests_total{reason}`` (``queue_full``, ``shutting_down``)
- ``logitjudge_forward_paths_total{path}``: engine forward groups per runner path
  (``prefix_packed:dense``, ``prefix_packed:cached``, ``packed:flex`` ...: which strategy ``auto`` chose)
- ``logitjudge_state_cache_{hits,misses,evictions,hit_tokens}_total``,
  ``logitjudge_state_cache_{bytes,entries,max_bytes}``: the engine's state cache
  (:mod:`logitjudge.engine.state_cache`), read from ``judge.counters()`` at each scrape
- ``logitjudge_low_option_mass_answers_total{type}``: answers whose ``x_option_mass`` is below
  :data:`~logitjudge.settings.LOW_OPTION_MASS` (each such request also logs one WARNING, see
  :meth:`ServerMetrics.observe_results`)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from logitjudge.settings import LOW_OPTION_MASS

__all__ = ["ServerMetrics", "low_option_mass"]

logger = logging.getLogger("logitjudge.server")

# Seconds: a 135M model on 2 CPU cores answers a small request in ~0.05-0.5 s; a 255-option
# choice or a long state takes seconds; queueing adds up to tens of seconds under overload.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_TOKEN_BUCKETS = (64, 256, 1024, 4096, 16384, 65536, 262144)


class ServerMetrics:
    """The server's metrics; also the scheduler's observer (queue depth, batches, rejections)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "logitjudge_http_requests", "HTTP requests answered", ["route", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "logitjudge_http_request_duration_seconds",
            "HTTP request latency, first byte in to last byte out",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.questions = Counter("logitjudge_questions", "Questions answered", ["type"], registry=r)
        self.input_tokens = Counter(
            "logitjudge_input_tokens", "Input tokens run (sum of usage.input_tokens)", registry=r
        )
        self.depth = Gauge("logitjudge_queue_depth", "Requests waiting for the engine", registry=r)
        self.queue_wait = Histogram(
            "logitjudge_queue_wait_seconds",
            "Seconds a request waited before its batch ran",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "logitjudge_batch_size", "Requests per engine call", buckets=_BATCH_SIZE_BUCKETS, registry=r
        )
        self.batch_tokens = Histogram(
            "logitjudge_batch_tokens", "Estimated tokens per engine call", buckets=_TOKEN_BUCKETS, registry=r
        )
        self.batch_seconds = Histogram(
            "logitjudge_batch_duration_seconds",
            "Seconds per engine call",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.rejections = Counter(
            "logitjudge_rejected_requests", "Requests refused without running", ["reason"], registry=r
        )
        self.low_mass = Counter(
            "logitjudge_low_option_mass_answers",
            f"Answers whose x_option_mass (label mass before renormalising) is below {LOW_OPTION_MASS}",
            ["type"],
            registry=r,
        )

    # -- HTTP ---------------------------------------------------------------------------------

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route=route, method=method, status=str(status)).inc()
        self.latency.labels(route=route).observe(seconds)

    def observe_answers(self, types: Sequence[str], input_tokens: int) -> None:
        for t in types:
            self.questions.labels(type=t).inc()
        self.input_tokens.inc(max(0, input_tokens))

    def observe_results(self, results: Iterable[Any], threshold: float = LOW_OPTION_MASS) -> None:
        """Count and log answers with low option mass, for each engine result of one engine call.

        One WARNING per request that has any (its question indexes, types and masses: never the
        state, a question's text or an id), and ``logitjudge_low_option_mass_answers_total{type}``
        counts each such answer. Errors among ``results`` are skipped.
        """
        for result in results:
            low = low_option_mass(getattr(result, "answers", ()), threshold)
            if not low:
                continue
            for _, qtype, _ in low:
                self.low_mass.labels(type=qtype).inc()
            logger.warning(
                "low option mass: %d of %d answers have x_option_mass below %s (LOW_OPTION_MASS): %s; "
                "the model put little probability on the answer labels, so their renormalised "
                "probabilities rest on little (the prompt fits this model badly)",
                len(low),
                len(result.answers),
                threshold,
                ", ".join(f"question {i} ({qtype}) {mass:.4g}" for i, qtype, mass in low),
            )

    def watch_engine(self, counters: Callable[[], Mapping[str, Any]] | None) -> None:
        """Export the engine's own counters (``judge.counters()``: runner paths, state cache),
        read at each scrape; ``None`` (a judge without them) exports nothing."""
        if counters is not None:
            self.registry.register(_EngineCollector(counters))

    def render(self) -> bytes:
        """The text exposition of every metric in this registry."""
        return generate_latest(self.registry)

    # -- SchedulerObserver --------------------------------------------------------------------

    def queue_depth(self, waiting: int) -> None:
        self.depth.set(waiting)

    def batch_done(self, size: int, tokens: int, seconds: float, waits: Sequence[float]) -> None:
        self.batch_size.observe(size)
        self.batch_tokens.observe(tokens)
        self.batch_seconds.observe(seconds)
        for w in waits:
            self.queue_wait.observe(w)

    def rejected(self, reason: str) -> None:
        self.rejections.labels(reason=reason).inc()


def low_option_mass(answers: Sequence[Any], threshold: float = LOW_OPTION_MASS) -> list[tuple[int, str, float]]:
    """``(index, type, option_mass)`` of each answer whose ``option_mass`` is below ``threshold``.

    ``answers`` are engine :class:`~logitjudge.engine.types.Answer` s (anything with ``type`` and
    ``option_mass``), in question order. A non-finite mass is not flagged (the response has none).
    """
    low = []
    for i, answer in enumerate(answers):
        mass = float(answer.option_mass)
        if math.isfinite(mass) and mass < threshold:
            low.append((i, str(answer.type), mass))
    return low


class _EngineCollector(Collector):
    """The engine's cumulative counters as Prometheus metrics, read when scraped."""

    def __init__(self, counters: Callable[[], Mapping[str, Any]]) -> None:
        self.counters = counters

    def collect(self) -> Iterator[Metric]:
        c = self.counters()
        paths = CounterMetricFamily(
            "logitjudge_forward_paths", "Engine forward groups per runner path (the strategy run)", labels=["path"]
        )
        for path, n in sorted((c.get("paths") or {}).items()):
            paths.add_metric([path], n)
        yield paths
        cache = c.get("state_cache")
        if not cache:
            return
        for name, doc in (
            ("hits", "State cache lookups that found the state's KV"),
            ("misses", "State cache lookups that did not"),
            ("evictions", "State cache entries dropped to stay within its bytes"),
            ("hit_tokens", "State tokens whose forward a hit skipped"),
        ):
            yield CounterMetricFamily(f"logitjudge_state_cache_{name}", doc, value=cache[name])
        for name, doc in (
            ("bytes", "Bytes of KV the state cache holds"),
            ("entries", "States the state cache holds"),
            ("max_bytes", "The state cache's bound in bytes (0 = off)"),
        ):
            yield GaugeMetricFamily(f"logitjudge_state_cache_{name}", doc, value=cache[name])
