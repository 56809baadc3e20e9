"""A client of a running logitjudge server: evaluate a data set, or ask typed questions, from
Python through ``logitjudge serve`` (one loaded model for every client), with bounded retries.

::

    from logitjudge.client import ask, evaluate

    run = evaluate("http://127.0.0.1:8000", "data.jsonl", ["RAG"], out="results.jsonl")
    for row in run.rows:
        print(row["id"], {name: r.get("score") for name, r in row["results"].items()})
    print(run.summary["faithfulness"].value("pass_rate"))

    body = {"model": "jev-latest", "state": "I was charged twice.",
            "questions": {"refund": {"type": "noul", "instructions": "Is a refund requested?"}}}
    ask("http://127.0.0.1:8000", body)["answers"]["refund"]["noul"]      # a probability, 0..1

- :func:`evaluate` is ``logitjudge evaluate --server``: the rows planned here as a local run plans
  them, sent to ``POST /api/v1/evaluate`` in batches, written to a resumable results file with
  its run record; the same call resumes a run a failure stopped.
- :func:`ask` is one ``POST /v1/systemone``; a :class:`ServerClient` makes many calls on one
  connection pool (``with ServerClient(url) as c: c.ask(body)``).
- Errors (:mod:`logitjudge.client.errors`): :class:`ServerRefusedError` and
  :class:`ServerMismatchError` are ``RequestError``s (fix the request), :class:`ServerUnreachableError`
  and :class:`ServerFailedError` are ``EngineError``s (already retried), all under
  :class:`ServerError`; :class:`ResultsFileError` is a results file this run cannot resume.

The key is ``api_key=`` or ``LOGITJUDGE_API_KEY``. This package needs no model, no torch and no
engine: it plans rows with :mod:`logitjudge.rubrics` and talks HTTP (httpx).
"""

from logitjudge.client.answerer import ServerAnswerer
from logitjudge.client.api import ServerRun, ask, evaluate
from logitjudge.client.errors import (
    ResultsFileError,
    ServerError,
    ServerFailedError,
    ServerMismatchError,
    ServerRefusedError,
    ServerUnreachableError,
)
from logitjudge.client.http import DEFAULT_RETRIES, DEFAULT_TIMEOUT, ServerClient, ServerInfo
from logitjudge.client.runfile import ENGINE_KEYS
from logitjudge.client.wire import check_api_key, normalize_url

__all__ = [
    "evaluate",
    "ask",
    "ServerRun",
    "ServerClient",
    "ServerInfo",
    "ServerAnswerer",
    "ServerError",
    "ServerRefusedError",
    "ServerMismatchError",
    "ServerUnreachableError",
    "ServerFailedError",
    "ResultsFileError",
    "ENGINE_KEYS",
    "DEFAULT_TIMEOUT",
    "DEFAULT_RETRIES",
    "normalize_url",
    "check_api_key",
]
