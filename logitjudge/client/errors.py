"""The errors of a client of a logitjudge server (:mod:`logitjudge.client`).

They sit in the one tree of :mod:`logitjudge.errors` (every one is a
:class:`~logitjudge.errors.LogitJudgeError`, with ``message`` and ``field``), and are raised on this
side of a server, never answered by one::

    LogitJudgeError
    ├── ServerError                       a call to the server did not give a usable answer
    │   ├── ServerRefusedError            also RequestError: a 4xx (or a redirect); fix the request
    │   ├── ServerMismatchError           also RequestError: another evaluator version or engine
    │   ├── ServerUnreachableError        also EngineError: no connection, or it was lost for good
    │   └── ServerFailedError             also EngineError: 5xx after the retries, no answer in time
    └── RequestError
        └── ResultsFileError              a results file that this run cannot resume (or write)

A :class:`~logitjudge.errors.RequestError` fails the same way when sent again unchanged; an
:class:`~logitjudge.errors.EngineError` may pass later (the client has already retried it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from logitjudge.errors import EngineError, LogitJudgeError, RequestError

__all__ = [
    "ServerError",
    "ServerRefusedError",
    "ServerMismatchError",
    "ServerUnreachableError",
    "ServerFailedError",
    "ResultsFileError",
]


class ServerError(LogitJudgeError):
    """Base of the errors of a call to a server (:mod:`logitjudge.client`, ``logitjudge evaluate --server``)."""

    error_type = "server_error"


class ServerRefusedError(ServerError, RequestError):
    """The server answered 4xx (or a redirect): the request as sent cannot succeed there.

    Attributes:
        status: the HTTP status (0 for an item refused here, before sending, as a server would).
        items: position in the batch -> the server's message, for the items a 422 names.
        too_large: the body or the number of items is over the server's limit (a smaller batch may pass).
    """

    error_type = "server_refused"

    def __init__(
        self,
        message: str,
        *,
        status: int,
        field: Sequence[str | int] = (),
        items: Mapping[int, str] | None = None,
        too_large: bool = False,
    ) -> None:
        super().__init__(message, field=field)
        self.status = status
        self.items = dict(items or {})
        self.too_large = too_large


class ServerMismatchError(ServerError, RequestError):
    """The server is not what this run's results file was made with (another evaluator version,
    another engine after a reconnect, another model between calls)."""

    error_type = "server_mismatch"


class ServerUnreachableError(ServerError, EngineError):
    """No connection to the server (refused, unknown host, TLS), or it was lost and not regained."""

    error_type = "server_unreachable"


class ServerFailedError(ServerError, EngineError):
    """The server failed: a 5xx after every retry, no answer in time, or an answer that is not the
    route's response."""

    error_type = "server_failed"


class ResultsFileError(RequestError):
    """A results file this run cannot resume or write: it holds rows of another configuration (the
    message names each difference), rows without a run record, rows while ``debias="batch"``, or
    the path is a directory or the data file itself. Nothing was written to it."""

    error_type = "results_file_error"
