"""The server side of a resumable run: :class:`ServerAnswerer` (an
:class:`~logitjudge.client.run.Answerer` whose engine is a running server's)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from logitjudge.client.batches import remote_results
from logitjudge.client.http import ServerClient, ServerInfo
from logitjudge.client.runfile import Pending
from logitjudge.rubrics.registry import Registry

__all__ = ["ServerAnswerer"]


class ServerAnswerer:
    """Answers a run's planned rows through ``client``'s server, ``batch_size`` rows per call.

    Args:
        client: the server's client (its ``engine_keys`` should be
            :data:`~logitjudge.client.runfile.ENGINE_KEYS`, so a restarted server is checked).
        registry: the evaluators the rows were planned with; thresholds: validated overrides;
        model: the ``model`` each request names; batch_size: rows per call at most (>= 1);
        notify: a line for a person: which server and engine, and when it does not describe one.

    Attributes:
        model_flags: ``{"server": <base URL>}``, as the run record keeps it.
        info: what the server said about itself, once :meth:`engine` asked.
    """

    def __init__(
        self,
        client: ServerClient,
        *,
        registry: Registry,
        thresholds: Mapping[str, float],
        model: str,
        batch_size: int,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.registry = registry
        self.thresholds = dict(thresholds)
        self.model = model
        self.batch_size = batch_size
        self.notify = notify or (lambda _line: None)
        self.model_flags: dict[str, Any] = {"server": client.url}
        self.info: ServerInfo | None = None

    def engine(self) -> dict[str, Any]:
        """The engine the server describes (``GET /healthz``; else the model ``GET /v1/models``
        names), which also checks the API key.

        Raises:
            ServerUnreachableError, ServerFailedError, ServerRefusedError: see :meth:`ServerClient.info`.
        """
        info = self.info = self.client.info()
        self.notify(f"evaluating through {self.client.url}: {info.label()}")
        if not info.described:
            self.notify(
                "the server does not describe its engine (GET /healthz), so the run record names its "
                "model only and a resume can check no more than that"
            )
        return info.engine

    def results(self, pending: Sequence[Pending]) -> Iterator[tuple[int, dict[str, Any]]]:
        """The records of ``pending``'s rows as each call returns
        (:func:`~logitjudge.client.batches.remote_results`); a server that leaves ``x_`` fields out
        unless asked is asked for them, so the rows are a local run's."""
        strict = self.info is not None and self.info.strict_wire
        return remote_results(
            self.client,
            [(rid, plan) for rid, _, plan in pending],
            registry=self.registry,
            thresholds=self.thresholds,
            model=self.model,
            batch_size=self.batch_size,
            extra={"x_strict_wire": False} if strict else None,
        )
