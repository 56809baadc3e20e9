"""``logitjudge evaluate``: run evaluators over a dataset file, resumably, and summarise.

::

    logitjudge evaluate DATA.jsonl --evaluators RAG --out results.jsonl [--report report.html]
    # auto: each row's own evaluator (the labelled data sets name theirs)
    logitjudge evaluate ../shared/data/vitaminc/dev.jsonl --out vc.jsonl --limit 20
    # through a running `logitjudge serve` (one loaded model for serving and evaluating)
    logitjudge evaluate DATA.jsonl --evaluators RAG --out results.jsonl --server http://127.0.0.1:8000

- Rows: our field names (``input``, ``output``, ``expected``, ``context``) or RAGAS names
  (``question``, ``answer``, ``contexts``, ``ground_truth``); JSONL, CSV, or Parquet (pandas).
- ``--evaluators``: comma-separated evaluator and suite names, or ``auto`` (the default): each
  row's own ``evaluator`` field, as in the labelled data sets (their typed-question rows run
  ``typed_question``). With ``auto``, a file where no row names an evaluator is refused (exit
  2, before the model loads); in a mixed file the rows without one are recorded as errors and a
  warning names them.
- Results: one JSON line per item as it finishes (see :mod:`logitjudge.rubrics.dataio`);
  re-running with the same ``--out`` skips the ids finished cleanly and retries rows with an
  error. ``<out>.run.json`` records what produced the file (evaluator selection with versions
  and thresholds, model flags, the engine's model, fingerprint, prompt version, dtype and
  calibration); a re-run under another configuration is refused (exit 2, naming what differs;
  the evaluator selection is checked before the model loads) unless ``--overwrite`` starts the
  file afresh.
- ``--debias batch``: each typed choice/score question asked of at least
  :data:`~logitjudge.rubrics.debias.MIN_BATCH` rows has its prior (its mean answer over them)
  divided out of its answers (:mod:`logitjudge.rubrics.debias`); the rows are written once all
  are answered, and a results file with rows is not resumed under it.
- ``--server URL``: the rows go to a running server's ``POST /api/v1/evaluate``
  (:mod:`logitjudge.client`), ``--batch-size`` rows per call, instead of a model loaded here;
  the model flags are then refused (the server's are used). The rows, the resume and the run
  record are those of a local run, the record's engine being the one the server describes
  (``GET /healthz``), so a file may be resumed locally or through another server of the same
  engine. Key: ``--api-key`` or ``LOGITJUDGE_API_KEY``; ``--timeout`` and ``--retries`` bound
  the waiting. A run stopped by the server (unreachable, a refusal, failures after every retry)
  keeps every row written; the same command resumes it. ``--debias batch`` is local only. From
  Python the same run is :func:`logitjudge.client.evaluate`.
- Summary: printed as a table and written as JSON (``--summary``, default ``<out>.summary.json``)
  with the command, configuration, environment, timing and per-evaluator metric records,
  including ``low_option_mass``: the share of answers whose ``x_option_mass`` is under
  :data:`logitjudge.settings.LOW_OPTION_MASS`.
- ``--report``: a self-contained HTML report (:mod:`logitjudge.rubrics.report`): the model's
  name and fingerprint, metrics with intervals (small samples marked), score histograms,
  reliability diagrams, and every item with its texts, each evaluator's verdict, per-chunk
  verdicts, gold and flags, with filters.

Exit status: 0 done (rows may still hold per-item errors, counted in the summary), 2 bad
arguments or data, a results file from another configuration, or a request the server refused
(4xx, another evaluator version), 1 the model could not be loaded, or the server could not be
reached or failed (after the retries).
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logitjudge import __version__
from logitjudge.cli.common import (
    add_model_args,
    add_subcommand,
    complain,
    float_between,
    load_failure,
    load_judge,
    nonnegative_int,
    positive_int,
    run_subcommand,
)
from logitjudge.cli.progress import ItemProgress
from logitjudge.cli.summary_table import print_table
from logitjudge.client import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    ENGINE_KEYS,
    ResultsFileError,
    ServerAnswerer,
    ServerClient,
    ServerError,
    ServerInfo,
)
from logitjudge.client.run import ResumableRun, RunOutcome, RunSetup, setup_run
from logitjudge.client.runfile import Pending
from logitjudge.contract.evaluate import EvaluatorSummary
from logitjudge.errors import LogitJudgeError, RequestError
from logitjudge.rubrics.aggregate import summarize
from logitjudge.rubrics.api import AUTO
from logitjudge.rubrics.dataio import DataError, read_rows, run_record_path
from logitjudge.rubrics.debias import DEBIAS_MODES, MIN_BATCH
from logitjudge.rubrics.judgelike import JudgeLike
from logitjudge.rubrics.registry import Registry, Selected, default_registry
from logitjudge.rubrics.runner import WIRE_MODEL, check_thresholds, run_plans
from logitjudge.settings import LOW_OPTION_MASS, client_api_key

__all__ = ["add_evaluate_parser", "run_evaluate", "main", "print_table", "ENGINE_KEYS"]

SUMMARY = "run evaluators over a dataset (JSONL/CSV/Parquet), resumably; summary table, JSON, HTML"
"""The subcommand's line in ``logitjudge --help``."""


def add_evaluate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``evaluate`` subcommand to the main CLI's subparsers."""
    p = add_subcommand(subparsers, "evaluate", SUMMARY, __doc__)
    p.add_argument("data", help="dataset file: .jsonl, .csv or .parquet")
    p.add_argument(
        "--evaluators",
        default=AUTO,
        help="comma-separated evaluators and suites (RAG, Correctness, Everything), or auto (default): "
        "each row's own `evaluator` field",
    )
    p.add_argument(
        "--out",
        required=True,
        help="results JSONL (appended; re-running resumes it, and refuses another configuration)",
    )
    p.add_argument("--summary", default=None, help="summary JSON path (default: <out>.summary.json)")
    p.add_argument("--report", default=None, help="write a self-contained HTML report here")
    p.add_argument("--limit", type=positive_int, default=None, help="use only the first N rows of the file")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=4,
        help="items per engine call, or per server call with --server (default 4)",
    )
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override an evaluator's pass threshold (repeatable)",
    )
    p.add_argument(
        "--positive",
        choices=("passed", "failed"),
        default="passed",
        help="positive class for precision/recall against gold labels",
    )
    p.add_argument("--request-model", default=WIRE_MODEL, help="the `model` name sent in each request")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start --out afresh (its rows and run record are replaced) instead of resuming it",
    )
    p.add_argument(
        "--debias",
        choices=DEBIAS_MODES,
        default="none",
        help="batch: divide each typed choice/score question's prior (its mean answer over the rows asking it, "
        f"at least {MIN_BATCH}) out of its answers (batch calibration, Zhou et al. 2024); rows are written "
        "once all are answered, and a file with rows is not resumed (default none)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--wide", action="store_true", help="every metric column in the summary table (default: 80 columns)")
    s = p.add_argument_group("through a running server (instead of loading a model here)")
    s.add_argument(
        "--server",
        default=None,
        metavar="URL",
        help="send the rows to the server at URL (`logitjudge serve`, or any server of POST /api/v1/evaluate), "
        "--batch-size rows per call; the run record holds the engine the server describes",
    )
    s.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="with --server: the API key to send (default: LOGITJUDGE_API_KEY). Visible to every local user "
        "in ps: prefer the variable",
    )
    s.add_argument(
        "--timeout",
        type=float_between(0.0, float("inf"), "seconds"),
        default=None,
        metavar="SECONDS",
        help=f"with --server: how long to wait for each answer (default {DEFAULT_TIMEOUT:g})",
    )
    s.add_argument(
        "--retries",
        type=nonnegative_int,
        default=None,
        help="with --server: retries of a call the server could not answer (5xx, 529 overloaded, a lost "
        f"connection), with backoff (default {DEFAULT_RETRIES})",
    )
    add_model_args(p)
    p.set_defaults(func=run_evaluate)
    return p


_fail = functools.partial(complain, "evaluate")
"""``_fail(message, status=2)``: the subcommand's one-line error (:func:`complain`)."""


def _server_status(exc: ServerError) -> int:
    """2 for a request the server refused (or a mismatch), 1 for a server that failed or cannot be reached."""
    return 2 if isinstance(exc, RequestError) else 1


def _model_flags_given(args: argparse.Namespace) -> list[str]:
    """The model flags given other than at their defaults (refused with ``--server``)."""
    probe = argparse.ArgumentParser(add_help=False)
    add_model_args(probe)
    return [
        a.option_strings[0]
        for a in probe._actions
        if a.option_strings and a.dest != "allow_download" and getattr(args, a.dest, a.default) != a.default
    ]


def _server_environment(info: ServerInfo) -> dict[str, Any]:
    """The summary's environment of a run through a server: this side's versions, the server's engine."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "logitjudge": __version__,
        "engine": info.engine,
        "server": {"url": info.url, "version": info.version, "models": list(info.models)},
    }


def _parse_thresholds(values: Sequence[str]) -> dict[str, float]:
    out = {}
    for v in values:
        name, sep, num = v.partition("=")
        if not sep:
            raise ValueError(f"--threshold {v!r}: expected NAME=VALUE")
        try:
            out[name.strip()] = float(num)
        except ValueError:
            raise ValueError(f"--threshold {v!r}: {num!r} is not a number") from None
    return out


def _environment(judge: JudgeLike) -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for mod in ("logitjudge", "torch", "transformers", "numpy", "sklearn", "pydantic"):
        if mod in sys.modules:
            env[mod] = getattr(sys.modules[mod], "__version__", "?")
    try:
        env["engine"] = json.loads(json.dumps(judge.describe(), default=str))
    except Exception:  # describe is informative only
        env["engine"] = None
    return env


# -- the steps of the subcommand -------------------------------------------------------------------


def _notice(line: str) -> None:
    print(f"logitjudge evaluate: {line}", file=sys.stderr)


def _model_flags(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k, None) for k in ("model", "dtype", "calibration", "judge_factory")}


class _LocalAnswerer:
    """A model loaded here with the model flags: the :class:`~logitjudge.client.run.Answerer` of a local run."""

    def __init__(self, args: argparse.Namespace, registry: Registry, thresholds: dict[str, float]) -> None:
        self.args = args
        self.registry = registry
        self.thresholds = thresholds
        self.model_flags = _model_flags(args)
        self.judge: JudgeLike | None = None
        self.bar: ItemProgress | None = None  # set before :meth:`results` (the progress inside engine calls)
        self.debiased: dict[str, int] = {}

    def engine(self) -> dict[str, Any]:
        self.judge = load_judge(self.args)
        return _environment(self.judge)["engine"] or {}

    def results(self, pending: Sequence[Pending]) -> Iterator[tuple[int, Any]]:
        assert self.judge is not None
        judge = self.bar.wrap(self.judge) if self.bar is not None else self.judge
        answers = run_plans(
            judge,
            (p for _, _, p in pending),
            model=self.args.request_model,
            thresholds=self.thresholds,
            batch_size=self.args.batch_size,
            registry=self.registry,
            debias=self.args.debias,
            debias_report=self.debiased,
        )
        return enumerate(answers)


@dataclass
class _Selection:
    """What the command line asks of the rows: the evaluators, the thresholds, the rows."""

    names: list[str]
    fixed: list[Selected] | None
    thresholds: dict[str, float]
    rows: list[dict[str, Any]]


def _selection(args: argparse.Namespace, registry: Registry) -> _Selection:
    """The evaluators (``auto``: None selected here), the validated thresholds and the rows.

    Raises:
        ValueError (DataError), RequestError: a bad flag value, an unknown name, an unreadable file.
    """
    names = [n.strip() for n in args.evaluators.split(",") if n.strip()]
    thresholds = check_thresholds(registry, _parse_thresholds(args.threshold))
    fixed = None if names == [AUTO] else registry.select(names)
    return _Selection(names, fixed, thresholds, read_rows(args.data, limit=args.limit))


def _server_client(args: argparse.Namespace) -> ServerClient | None:
    """The client of ``--server`` (no call made yet), or None without it; the server flags checked
    before the results file or the server is touched.

    Raises:
        ValueError: a bad URL or key, model flags or ``--debias batch`` with ``--server``, or a
            server flag without it.
    """
    if args.server is None:
        server_only = (("--api-key", args.api_key), ("--timeout", args.timeout), ("--retries", args.retries))
        if unused := [flag for flag, value in server_only if value is not None]:
            raise ValueError(f"{', '.join(unused)}: only used with --server URL")
        return None
    key = args.api_key if args.api_key is not None else client_api_key()
    client = ServerClient(  # checks the URL and the key
        args.server,
        api_key=key,
        timeout=args.timeout if args.timeout is not None else DEFAULT_TIMEOUT,
        retries=args.retries if args.retries is not None else DEFAULT_RETRIES,
        engine_keys=ENGINE_KEYS,
        notify=_notice,
    )
    if given := _model_flags_given(args):
        client.close()
        raise ValueError(
            f"{', '.join(given)}: with --server the server's model and settings are used; "
            "start `logitjudge serve` with them instead"
        )
    if args.debias == "batch":
        client.close()
        raise ValueError(
            "--debias batch divides each question's prior over all rows of one run, and a server "
            "answers each call on its own; run it without --server"
        )
    return client


def _check_engine(run: ResumableRun) -> int | None:
    """Load the model (or ask the server) when needed, and check it against the results file."""
    try:
        run.check_engine()
    except ResultsFileError as exc:
        return _fail(exc.message)
    except ServerError as exc:
        return _fail(exc.message, _server_status(exc))
    except LogitJudgeError as exc:
        return _fail(f"{load_failure(exc)}: {exc.message}", 1)
    return None


def _answer(run: ResumableRun, args: argparse.Namespace) -> int | None:
    """Answer and write the planned rows, with the progress bar; the exit status when it stops."""
    pending, rows, answerer = run.setup.pending, run.setup.rows, run.answerer
    if not pending:
        run.answer()
        return None
    bar = ItemProgress(len(rows), len(rows) - len(pending), len(pending), args.batch_size, args.no_progress)
    local = isinstance(answerer, _LocalAnswerer)
    if isinstance(answerer, _LocalAnswerer):  # the bar moves inside the engine's calls too
        answerer.bar = bar

    def on_row(record: dict[str, Any]) -> None:
        usage = record.get("usage")  # a server's input tokens: no hook counted them
        bar.item_written(tokens=usage.get("input_tokens", 0) if isinstance(usage, dict) and not local else 0)

    try:
        run.answer(on_row)
    except ServerError as exc:
        return _fail(
            f"{exc.message}\nlogitjudge evaluate: stopped after {run.ran} of {len(pending)} rows; every "
            f"finished row is in {args.out}, and the same command resumes the run",
            _server_status(exc),
        )
    except LogitJudgeError as exc:  # e.g. an unknown --request-model: nothing can run
        return _fail(f"{type(exc).__name__}: {exc.message}")
    finally:
        bar.close()
    if isinstance(answerer, _LocalAnswerer) and args.debias == "batch":
        d = answerer.debiased
        _notice(
            f"batch calibration: the prior of {d['questions']} choice/score questions divided out of their "
            f"{d['answers']} answers; {d['left']} questions asked fewer than {MIN_BATCH} times left as answered"
        )
    return None


def _summary_record(
    args: argparse.Namespace, run: ResumableRun, outcome: RunOutcome, summary: dict[str, EvaluatorSummary]
) -> dict[str, Any]:
    """The summary JSON: the command, configuration, environment, engine, run counts and metrics."""
    setup, answerer = run.setup, run.answerer
    judge = answerer.judge if isinstance(answerer, _LocalAnswerer) else None
    info = answerer.info if isinstance(answerer, ServerAnswerer) else None
    server = answerer.client.url if isinstance(answerer, ServerAnswerer) else None
    pending, elapsed = len(setup.pending), outcome.elapsed_s
    command = ["logitjudge", "evaluate", *sys.argv[2:]] if sys.argv[1:2] == ["evaluate"] else sys.argv
    return {
        "command": " ".join(command),
        "data": str(args.data),
        "out": str(args.out),
        "run_record": str(run_record_path(args.out)),
        "config": {
            "evaluators": setup.names,
            "model": args.model,
            "server": server,
            "request_model": args.request_model,
            "batch_size": args.batch_size,
            "thresholds": setup.thresholds,
            "positive": args.positive,
            "limit": args.limit,
            "debias": args.debias,
            "low_option_mass_threshold": LOW_OPTION_MASS,
        },
        "environment": (
            _environment(judge) if judge is not None else _server_environment(info) if info is not None else None
        ),
        "engine": outcome.engine,
        "run": {
            "rows": len(setup.rows),
            "done_before": len(setup.resumed),
            "retried": len(setup.retried),
            "ran": pending,
            "invalid_rows": len(setup.invalid),
            "model_loaded": judge is not None,
            "server": server,
            "elapsed_s": round(elapsed, 3),
            "items_per_s": round(pending / elapsed, 3) if pending and elapsed > 0 else None,
            "debias": {"mode": args.debias, **(answerer.debiased if isinstance(answerer, _LocalAnswerer) else {})},
        },
        "summary": {k: v.model_dump(mode="json") for k, v in summary.items()},
    }


def _write_report(args: argparse.Namespace, setup: RunSetup, outcome: RunOutcome, summary: Any) -> None:
    from logitjudge.rubrics.report import build_report

    meta = {
        "data": args.data,
        "results": Path(args.out),
        "evaluators": ",".join(setup.names),
        "rows": len(outcome.rows),
    }
    Path(args.report).write_text(
        build_report(
            summary,
            outcome.rows,
            title=f"logitjudge evaluate: {Path(args.data).name}",
            meta=meta,
            engine=outcome.engine,
            sources=dict(zip(setup.ids, setup.rows, strict=True)),
        ),
        encoding="utf-8",
    )
    print(f"report: {args.report}")


def _run(args: argparse.Namespace, registry: Registry, chosen: _Selection, client: ServerClient | None) -> int:
    """Plan, answer (here or through ``client``), write and summarise (the steps of :mod:`logitjudge.client.run`)."""
    out = Path(args.out)
    try:
        setup = setup_run(
            chosen.rows,
            chosen.names,
            chosen.fixed,
            registry=registry,
            thresholds=chosen.thresholds,
            out=out,
            data=str(args.data),
            data_path=Path(args.data),
            overwrite=args.overwrite,
            debias=args.debias,
            notify=_notice,
        )
    except LogitJudgeError as exc:
        return _fail(exc.message)
    except DataError as exc:
        return _fail(str(exc))
    answerer: ServerAnswerer | _LocalAnswerer
    if client is not None:
        answerer = ServerAnswerer(
            client,
            registry=registry,
            thresholds=chosen.thresholds,
            model=args.request_model,
            batch_size=args.batch_size,
            notify=_notice,
        )
    else:
        answerer = _LocalAnswerer(args, registry, chosen.thresholds)
    run = ResumableRun(setup, answerer, _notice)
    if (status := _check_engine(run)) is not None:
        return status
    try:
        run.open()
    except DataError as exc:
        return _fail(str(exc))
    if (status := _answer(run, args)) is not None:
        return status
    outcome = run.finish()
    summary = summarize(outcome.rows, positive=args.positive)
    print_table(summary, wide=args.wide)
    summary_path = Path(args.summary) if args.summary else out.with_name(out.name + ".summary.json")
    summary_path.write_text(
        json.dumps(
            _summary_record(args, run, outcome, summary), indent=2, ensure_ascii=False, allow_nan=False, default=str
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"results: {out} ({len(outcome.rows)} rows)   summary: {summary_path}")
    if args.report:
        _write_report(args, setup, outcome, summary)
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    """The ``evaluate`` subcommand (see the module docstring)."""
    registry = default_registry()
    try:
        chosen = _selection(args, registry)
        client = _server_client(args)
    except (ValueError, RequestError) as exc:  # a bad flag value or name, an unreadable data file
        return _fail(str(exc))
    try:
        return _run(args, registry, chosen, client)
    finally:
        if client is not None:
            client.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m logitjudge.cli.evaluate DATA ...``: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="logitjudge")
    sub = parser.add_subparsers(dest="command", required=True)
    add_evaluate_parser(sub)
    args = parser.parse_args(["evaluate", *(sys.argv[1:] if argv is None else argv)])
    return run_subcommand(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
