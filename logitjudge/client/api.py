"""Evaluate a data set, or ask typed questions, through a running logitjudge server.

::

    from logitjudge.client import ask, evaluate

    run = evaluate("http://127.0.0.1:8000", "data.jsonl", ["RAG"], out="results.jsonl")
    run.summary["faithfulness"].value("pass_rate")
    answer = ask("http://127.0.0.1:8000", {"model": "jev-latest", "state": "...", "questions": {...}})

:func:`evaluate` is what ``logitjudge evaluate --server URL`` runs: the same rows, results file,
run record, resume, retries and refusals (the command adds the progress bar, the summary JSON and
the report).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from logitjudge.client.answerer import ServerAnswerer
from logitjudge.client.http import DEFAULT_RETRIES, DEFAULT_TIMEOUT, ServerClient, ServerInfo
from logitjudge.client.run import ResumableRun, RunOutcome, RunSetup, setup_run
from logitjudge.client.runfile import ENGINE_KEYS
from logitjudge.contract.evaluate import EvaluatorSummary
from logitjudge.contract.systemone import SystemOneRequest
from logitjudge.rubrics.aggregate import summarize
from logitjudge.rubrics.api import AUTO
from logitjudge.rubrics.dataio import read_rows
from logitjudge.rubrics.registry import Registry, default_registry
from logitjudge.rubrics.runner import WIRE_MODEL, check_thresholds
from logitjudge.settings import client_api_key

__all__ = ["ServerRun", "evaluate", "ask"]


@dataclass(frozen=True)
class ServerRun:
    """The outcome of :func:`evaluate`.

    Attributes:
        rows: one results row per data row that has one, in the data's order: the row a results
            file holds (``{"id", "results", "passed"?, "usage", "evaluator"?, "gold"?, "x_lengths"}``;
            ``results`` maps each evaluator to ``{"status", "score" (0..1), "passed", ...}``), rows
            resumed from ``out`` included. A row that cannot run has ``error`` and empty ``results``.
        summary: per-evaluator metrics over ``rows`` (:func:`~logitjudge.rubrics.aggregate.summarize`).
        engine: the engine the rows came from (the server's description, or the run record's).
        server: what the server said about itself (None when nothing needed it: every row resumed).
        out: the results file (None: the rows were kept in memory only).
        resumed, retried, ran, invalid: rows found done in ``out``, rows whose error rows ran again,
            rows answered now, rows that cannot run (written as error rows).
        elapsed_s: seconds spent answering.
    """

    rows: list[dict[str, Any]]
    summary: dict[str, EvaluatorSummary]
    engine: dict[str, Any] | None
    server: ServerInfo | None
    out: Path | None
    resumed: int
    retried: int
    ran: int
    invalid: int
    elapsed_s: float


def _client(
    server: str | ServerClient, api_key: str | None, timeout: float, retries: int, notify: Callable[[str], None] | None
) -> tuple[ServerClient, bool]:
    """(the client, whether it is made here and so closed here)."""
    if isinstance(server, ServerClient):
        return server, False
    key = api_key if api_key is not None else client_api_key()
    made = ServerClient(server, api_key=key, timeout=timeout, retries=retries, engine_keys=ENGINE_KEYS, notify=notify)
    return made, True


def _rows(data: str | Path | Iterable[Mapping[str, Any]], limit: int | None) -> tuple[list[dict[str, Any]], str]:
    if isinstance(data, (str, Path)):
        return read_rows(data, limit=limit), str(data)
    rows = [dict(r) for r in data]
    return (rows if limit is None else rows[:limit]), "(rows given in Python)"


def _server_run(setup: RunSetup, outcome: RunOutcome, info: ServerInfo | None, positive: Any) -> ServerRun:
    """The :class:`ServerRun` of a finished run: its rows in the data's order, and their summary."""
    order = {rid: i for i, rid in enumerate(setup.ids)}
    return ServerRun(
        rows=sorted(outcome.rows, key=lambda r: order[str(r.get("id"))]),
        summary=summarize(outcome.rows, positive=positive),
        engine=outcome.engine,
        server=info,
        out=None if setup.file is None else setup.file.out,
        resumed=len(setup.resumed),
        retried=len(setup.retried),
        ran=outcome.ran,
        invalid=len(setup.invalid),
        elapsed_s=outcome.elapsed_s,
    )


def evaluate(
    server: str | ServerClient,
    data: str | Path | Iterable[Mapping[str, Any]],
    evaluators: str | Sequence[str] = AUTO,
    *,
    out: str | Path | None = None,
    overwrite: bool = False,
    thresholds: Mapping[str, float] | None = None,
    model: str = WIRE_MODEL,
    batch_size: int = 4,
    positive: Literal["passed", "failed"] = "passed",
    limit: int | None = None,
    api_key: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    registry: Registry | None = None,
    notify: Callable[[str], None] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> ServerRun:
    """Evaluate a data set through the server at ``server``, resumably when ``out`` is given.

    Each row is planned here as a local run plans it; the evaluators that need the model go to the
    server's ``POST /api/v1/evaluate``, ``batch_size`` rows per call. With ``out`` the rows are
    appended to that JSONL results file as each call returns, with its run record
    (``<out>.run.json``: the selection and the engine the server describes); calling again with
    the same ``out`` skips the rows finished cleanly and runs the rows with an error again, and
    refuses a file made under another selection or engine (unless ``overwrite``). A file made by
    ``logitjudge evaluate`` (local or ``--server``) resumes here and the other way round.

    Args:
        server: the server's base URL (``http://127.0.0.1:8000``), or a :class:`ServerClient`
            (not closed here; make it with ``engine_keys=ENGINE_KEYS`` to check a restarted server).
        data: a data file (``.jsonl``, ``.csv``, ``.parquet``) or rows: dicts with ``input``,
            ``output``, ``expected``, ``context`` (or RAGAS names), an optional ``id`` (else the
            row's position), ``evaluator`` and gold fields.
        evaluators: names and suites (``["RAG"]``, ``"faithfulness,answer_relevancy"``), or
            ``"auto"``: each row's own ``evaluator`` field.
        out: the results file (JSONL), or None to keep the rows in memory only (no resume).
        overwrite: start ``out`` afresh instead of resuming it.
        thresholds: pass thresholds (0..1) by evaluator name, overriding the defaults.
        model: the ``model`` each request names; batch_size: rows per call (>= 1);
        positive: the positive class for precision and recall against gold labels;
        limit: use only the first ``limit`` rows.
        api_key: sent as a bearer token (default: ``LOGITJUDGE_API_KEY``); timeout: seconds to wait
            for each answer; retries: retries of a call the server could not answer (5xx, 529, 429,
            408, a lost connection), with backoff.
        notify: called with a line for a person (the server's engine, a resume, each retry).
        on_row: called with each results row as it is written.

    Returns:
        A :class:`ServerRun`.

    Raises:
        ServerUnreachableError, ServerFailedError: the server cannot be reached or failed after the
            retries (``EngineError``s); ServerRefusedError: it refused the key or a request;
            ServerMismatchError: it answers another evaluator version, or came back with another
            engine (``RequestError``s). The rows written before any of these stay in ``out``, and
            the same call resumes.
        ResultsFileError: ``out`` holds rows of another selection or engine, or no run record.
        UnknownEvaluatorError, InvalidRequestError: an unknown evaluator or threshold name, a
            threshold outside 0..1, two rows with one id, or no row that can run.
        DataError: ``data`` or ``out`` cannot be read. ValueError: ``server`` is not an http(s)
            URL, or ``api_key`` cannot be sent.
    """
    registry = registry or default_registry()
    names = [n.strip() for n in evaluators.split(",")] if isinstance(evaluators, str) else list(evaluators)
    checked = check_thresholds(registry, thresholds)
    fixed = None if names == [AUTO] else registry.select(names)
    rows, label = _rows(data, limit)
    client, owned = _client(server, api_key, timeout, retries, notify)
    try:
        setup = setup_run(
            rows,
            names,
            fixed,
            registry=registry,
            thresholds=checked,
            data=label,
            out=None if out is None else Path(out),
            data_path=Path(data) if isinstance(data, (str, Path)) else None,
            overwrite=overwrite,
            notify=notify,
        )
        answerer = ServerAnswerer(
            client, registry=registry, thresholds=checked, model=model, batch_size=batch_size, notify=notify
        )
        run = ResumableRun(setup, answerer, notify or (lambda _line: None))
        run.check_engine()
        run.open()
        run.answer(on_row)
        outcome = run.finish()
    finally:
        if owned:
            client.close()
    return _server_run(setup, outcome, answerer.info, positive)


def ask(
    server: str | ServerClient,
    body: Mapping[str, Any] | SystemOneRequest,
    *,
    api_key: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
    notify: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Ask the server at ``server`` one ``POST /v1/systemone`` request, with the retries of
    :func:`evaluate` (the same answer as :meth:`logitjudge.Judge.ask` on the server's judge).

    Args:
        server: the server's base URL, or a :class:`ServerClient` (not closed here; reuse one
            for many requests).
        body: ``{"model": "jev-latest", "state": ..., "questions": {id: {"type": "noul" | "choice"
            | "score", ...}}}`` (the request of the API specification, Part A), or a
            :class:`~logitjudge.contract.systemone.SystemOneRequest`.
        api_key, timeout, retries, notify: as for :func:`evaluate`.

    Returns:
        The response JSON as a dict: ``{"model", "answers": {id: answer}, "usage"}``; a ``noul``
        answer is a probability (0..1), a ``choice`` has ``probabilities`` by option name and a
        ``confidence``, a ``score`` is the expected level (0..n-1) with its ``probabilities``.

    Raises:
        ServerRefusedError: the server refused the request (an invalid field: ``field`` names
            it; an unknown model; the API key). ServerUnreachableError, ServerFailedError: as
            for :func:`evaluate`. ValueError: ``server`` or ``api_key`` cannot be used.
    """
    client, owned = _client(server, api_key, timeout, retries, notify)
    try:
        return client.ask(body)
    finally:
        if owned:
            client.close()
