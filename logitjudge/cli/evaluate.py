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
  (:mod:`logitjudge.cli.remote`), ``--batch-size`` rows per call, instead of a model loaded here;
  the model flags are then refused (the server's are used). The rows, the resume and the run
  record are those of a local run, the record's engine being the one the server describes
  (``GET /healthz``), so a file may be resumed locally or through another server of the same
  engine. Key: ``--api-key`` or ``LOGITJUDGE_API_KEY``; ``--timeout`` and ``--retries`` bound
  the waiting. A run stopped by the server (unreachable, a refusal, failures after every retry)
  keeps every row written; the same command resumes it. ``--debias batch`` is local only.
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
import datetime
import functools
import io
import json
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from logitjudge import __version__
from logitjudge.cli.common import (
    add_model_args,
    add_subcommand,
    complain,
    float_between,
    load_judge,
    nonnegative_int,
    positive_int,
    run_subcommand,
)
from logitjudge.cli.progress import ItemProgress
from logitjudge.cli.remote import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    EvaluateClient,
    ServerError,
    ServerInfo,
    check_api_key,
    normalize_url,
    remote_results,
)
from logitjudge.contract.evaluate import EvaluatorSummary
from logitjudge.errors import LogitJudgeError, RequestError
from logitjudge.rubrics.aggregate import DATASET_EVALUATORS, gold_of, summarize
from logitjudge.rubrics.api import AUTO, selection_for, to_item
from logitjudge.rubrics.dataio import (
    DataError,
    ResultsWriter,
    read_rows,
    read_run_record,
    results_rows,
    row_id,
    run_record_path,
    scan_results,
    write_run_record,
)
from logitjudge.rubrics.debias import DEBIAS_MODES, MIN_BATCH
from logitjudge.rubrics.items import text_lengths
from logitjudge.rubrics.judgelike import JudgeLike
from logitjudge.rubrics.registry import Registry, Selected, default_registry
from logitjudge.rubrics.runner import WIRE_MODEL, ItemPlan, check_thresholds, plan_item, run_plans
from logitjudge.settings import LOW_OPTION_MASS, client_api_key

__all__ = ["add_evaluate_parser", "run_evaluate", "main"]

RUN_RECORD_FORMAT = "logitjudge-evaluate-run/1"

ENGINE_KEYS = ("model", "fingerprint", "prompt_version", "dtype", "calibration", "default_rotations")
"""What identifies the engine behind a results file: the same keys give the same answers."""

TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mean_score", "mean"),
    ("pass_rate", "pass"),
    ("low_option_mass", "low mass"),
    ("precision", "P"),
    ("recall", "R"),
    ("f1", "F1"),
    ("accuracy", "acc"),
    ("auroc", "AUROC"),
    ("length_baseline_auroc", "len AUROC"),
    ("pairwise_accuracy", "pairwise"),
    ("length_baseline_pairwise_accuracy", "len pairwise"),
    ("chunk_accuracy", "chunk acc"),
    ("chunk_macro_f1", "chunk F1"),
)


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


NARROW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("mean_score", "mean"),
    ("pass_rate", "pass"),
    ("low_option_mass", "low"),
    ("auroc", "AUROC"),
    ("length_baseline_auroc", "len"),
    ("accuracy", "acc"),
    ("f1", "F1"),
    ("pairwise_accuracy", "pairs"),
    ("chunk_accuracy", "chunk"),
)
"""The default (80-column) table's metric columns, most wanted first; ``--wide``: :data:`TABLE_COLUMNS`."""

NARROW_WIDTH = 80


def _summary_table(summary: dict[str, EvaluatorSummary], shown: Sequence[tuple[str, str]], wide: bool) -> Any:
    from rich import box
    from rich.table import Table

    if wide:
        table = Table(title="logitjudge evaluate: summary")
        counts, digits = ("n", "skipped", "errors"), 3
    else:
        table = Table(title="logitjudge evaluate: summary", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
        counts, digits = ("n", "skip", "err"), 2
    for col in ("evaluator", *counts, *(t for _, t in shown)):
        table.add_column(col, justify="left" if col == "evaluator" else "right", no_wrap=True)
    for name, s in summary.items():
        cells = [name, str(s.n), str(s.skipped), str(s.errors)]
        cells += ["–" if s.value(key) is None else f"{s.value(key):.{digits}f}" for key, _ in shown]
        table.add_row(*cells)
    return table


def print_table(summary: dict[str, EvaluatorSummary], wide: bool = False) -> None:
    """The summary as a table (rich), one row per evaluator: at most 80 columns with two
    decimals (the :data:`NARROW_COLUMNS` that fit, most wanted first), or every
    :data:`TABLE_COLUMNS` column with three when ``wide``; then a line per evaluator with
    answers under the option-mass threshold."""
    from rich.console import Console

    present = [(k, t) for k, t in TABLE_COLUMNS if any(s.value(k) is not None for s in summary.values())]
    if wide:
        Console(file=sys.stdout, width=200).print(_summary_table(summary, present, wide=True))
    else:
        shown = [(k, t) for k, t in NARROW_COLUMNS if any(s.value(k) is not None for s in summary.values())]
        probe = Console(width=1000, file=io.StringIO(), record=True)
        while True:
            table = _summary_table(summary, shown, wide=False)
            probe.print(table)
            width = max((len(line.rstrip()) for line in probe.export_text(clear=True).splitlines()), default=0)
            if width <= NARROW_WIDTH or not shown:
                break
            shown.pop()
        Console(file=sys.stdout, width=NARROW_WIDTH).print(table)
        notes = {
            "low": "low: low mass, the share of answers under the option-mass threshold",
            "len": "len: the length baseline's AUROC",
        }
        for _, title in shown:
            if title in notes:
                print(notes[title])
        if len(present) > len(shown):
            print(f"{len(present) - len(shown)} more metric column(s): --wide, or the summary JSON")
    for name, s in summary.items():
        extra = [
            m for m in s.metrics if m.name.startswith(("accuracy_", "mae_", "gold_unknown")) and m.value is not None
        ]
        if name == "typed_question" and extra:
            print("typed_question: " + ", ".join(f"{m.name}={m.value:.3f} (n={m.n})" for m in extra))
    for name, s in summary.items():
        low = s.metric("low_option_mass")
        if low is not None and low.value:
            print(
                f"low option mass: {name}: {round(low.value * low.n)} of {low.n} answers under {LOW_OPTION_MASS}"
                + (
                    " (the model put almost no probability on the answer labels; those scores rest on almost nothing)"
                    if wide
                    else "\n  (almost no probability on the labels: those scores rest on almost nothing)"
                )
            )


# -- what produced a results file (``<out>.run.json``) -------------------------------------------


def _selection_record(
    registry: Registry,
    requested: Sequence[str],
    fixed: Sequence[Selected] | None,
    rows: Sequence[Mapping[str, Any]],
    thresholds: Mapping[str, float],
    debias: str = "none",
) -> dict[str, Any]:
    """The evaluator selection of a run: the evaluators it resolves to (or ``auto``), their
    versions and effective thresholds, the ``--debias`` mode, and the names as given (for
    messages only).

    With ``auto`` the versions and thresholds are those of the evaluators the rows name.
    """
    if fixed is not None:
        evaluators: str | list[str] = [s.name for s in fixed]
        names = list(evaluators)
    else:
        evaluators = AUTO
        own = {DATASET_EVALUATORS.get(e, e) for r in rows if isinstance(e := r.get("evaluator"), str)}
        if any(isinstance(r.get("question"), dict) for r in rows):
            own.add("typed_question")
        names = sorted(n for n in own if n in registry.evaluators)
    defs = {n: registry.evaluators[n] for n in names}
    return {
        "requested": list(requested),
        "evaluators": evaluators,
        "versions": {n: d.version for n, d in defs.items()},
        "thresholds": {n: thresholds.get(n, d.threshold) for n, d in defs.items()},
        "debias": debias,
    }


def _model_flags(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k, None) for k in ("model", "dtype", "calibration", "judge_factory")}


def _shown(value: Any, *, digest: bool = False) -> str:
    """A recorded value for a message: lists joined, digests shortened to 12 characters."""
    if isinstance(value, list):
        return ",".join(map(str, value)) or "(none)"
    if digest and isinstance(value, str) and len(value) > 12:
        return value[:12] + "…"
    return "none" if value is None else str(value)


def selection_differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between a recorded and the current evaluator selection (empty when none)."""
    out = []
    if recorded.get("evaluators") != current["evaluators"]:
        old = recorded.get("requested", recorded.get("evaluators"))
        out.append(f"--evaluators: {_shown(current['requested'])} now, {_shown(old)} in the file")
    if recorded.get("debias", "none") != current.get("debias", "none"):
        out.append(f"--debias: {current.get('debias', 'none')} now, {recorded.get('debias', 'none')} in the file")
    for key, what in (("versions", "version"), ("thresholds", "threshold")):
        old = recorded.get(key) or {}
        for name in sorted(set(old) & set(current[key])):
            if old[name] != current[key][name]:
                out.append(f"{name} {what}: {current[key][name]} now, {old[name]} in the file")
    return out


def engine_differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between the recorded and the loaded engine (:data:`ENGINE_KEYS`)."""
    out = []
    for key in ENGINE_KEYS:
        if recorded.get(key) != current.get(key):
            digest = key in ("fingerprint", "calibration")
            now, then = _shown(current.get(key), digest=digest), _shown(recorded.get(key), digest=digest)
            out.append(f"{key}: {now} now, {then} in the file")
    return out


def _refuse(out: Path, differences: Sequence[str]) -> int:
    return _fail(
        f"{out} was produced by another configuration ({'; '.join(differences)}); resuming would mix "
        f"both in one file. Use another --out, or --overwrite to start {out.name} afresh."
    )


# -- the subcommand --------------------------------------------------------------------------------


def _plan_rows(
    registry: Registry,
    fixed: Sequence[Selected] | None,
    ids: Sequence[str],
    rows: Sequence[dict[str, Any]],
    done: set[str],
) -> tuple[list[tuple[str, dict[str, Any], ItemPlan]], list[tuple[str, str, bool]]]:
    """(plans of the rows not done, rows that cannot be planned: (id, error, lacks an evaluator))."""
    pending: list[tuple[str, dict[str, Any], ItemPlan]] = []
    invalid: list[tuple[str, str, bool]] = []
    for rid, raw in zip(ids, rows, strict=True):
        if rid in done:
            continue
        try:
            item = to_item({**raw, "id": rid})
            plan = plan_item(item, fixed or selection_for(registry, AUTO, item), strict=False)
        except RequestError as exc:
            lacks = fixed is None and exc.field == ("evaluator",) and not isinstance(raw.get("evaluator"), str)
            invalid.append((rid, f"{type(exc).__name__}: {exc.message}", lacks))
            continue
        pending.append((rid, raw, plan))
    return pending, invalid


def _nothing_plannable(data: str, invalid: Sequence[tuple[str, str, bool]]) -> str:
    lacking = sum(lacks for *_, lacks in invalid)
    if lacking == len(invalid):
        return (
            f"{data}: no row has an `evaluator` field, and --evaluators is auto (the default), so no "
            "evaluator can be chosen for any row; name them, e.g. --evaluators RAG (or "
            "faithfulness,answer_relevancy). Nothing was run or written."
        )
    first = next((rid, why) for rid, why, lacks in invalid if not lacks)
    return (
        f"{data}: no row can be evaluated ({len(invalid) - lacking} invalid rows, {lacking} without an "
        f"`evaluator` field while --evaluators is auto); first: {first[0]}: {first[1]}. Nothing was run or written."
    )


def run_evaluate(args: argparse.Namespace) -> int:
    """The ``evaluate`` subcommand (see the module docstring)."""
    registry = default_registry()
    names = [n.strip() for n in args.evaluators.split(",") if n.strip()]
    try:
        thresholds = check_thresholds(registry, _parse_thresholds(args.threshold))
        fixed = None if names == [AUTO] else registry.select(names)
        rows = read_rows(args.data, limit=args.limit)
    except (ValueError, RequestError) as exc:
        return _fail(str(exc))
    ids = [row_id(r, i) for i, r in enumerate(rows)]
    seen: set[str] = set()
    dupes = [i for i in ids if i in seen or seen.add(i)]  # type: ignore[func-returns-value]
    if dupes:
        return _fail(f"{args.data}: duplicate ids (resuming needs unique ids): {', '.join(sorted(set(dupes))[:5])}")
    out = Path(args.out)
    if out.is_dir():
        return _fail(f"--out {out}: is a directory; give the results file's path")
    if out.exists() and Path(args.data).exists() and out.resolve() == Path(args.data).resolve():
        return _fail(f"--out {out} is the data file itself; results go to another file")
    summary_path = Path(args.summary) if args.summary else out.with_name(out.name + ".summary.json")
    selection = _selection_record(registry, names, fixed, rows, thresholds, args.debias)

    # Through a server: its URL and key are checked here, before the results file or the server is touched.
    server: str | None = None
    api_key: str | None = None
    if args.server is not None:
        try:
            server = normalize_url(args.server)
            key = args.api_key if args.api_key is not None else client_api_key()
            api_key = check_api_key(key) if key else None
        except ValueError as exc:
            return _fail(str(exc))
        if given := _model_flags_given(args):
            return _fail(
                f"{', '.join(given)}: with --server the server's model and settings are used; "
                "start `logitjudge serve` with them instead"
            )
        if args.debias == "batch":
            return _fail(
                "--debias batch divides each question's prior over all rows of one run, and a server "
                "answers each call on its own; run it without --server"
            )
    else:
        server_only = (("--api-key", args.api_key), ("--timeout", args.timeout), ("--retries", args.retries))
        unused = [flag for flag, value in server_only if value is not None]
        if unused:
            return _fail(f"{', '.join(unused)}: only used with --server URL")
    model_flags = {"server": server} if server is not None else _model_flags(args)

    # What the file holds and what produced it; a resume under another selection stops here,
    # before the model loads.
    try:
        done, errored = (set(), set()) if args.overwrite else scan_results(out)
        record = None if args.overwrite else read_run_record(out)
    except DataError as exc:
        return _fail(str(exc))
    existing = bool(done or errored)
    if existing and record is None:
        return _fail(
            f"{out} has rows but no run record ({run_record_path(out).name}), so what produced them is "
            f"unknown; use another --out, or --overwrite to start {out.name} afresh"
        )
    if existing and record is not None and (diffs := selection_differences(record.get("selection") or {}, selection)):
        return _refuse(out, diffs)
    if existing and args.debias == "batch":
        return _fail(
            f"--debias batch divides each question's prior over all rows in one run, so {out} (it has "
            f"rows) cannot be resumed; use another --out, or --overwrite to start {out.name} afresh"
        )

    pending, invalid = _plan_rows(registry, fixed, ids, rows, done)
    resumed = [i for i in ids if i in done]
    if invalid and not pending and not resumed:
        return _fail(_nothing_plannable(args.data, invalid))
    lacking = [rid for rid, _, lacks in invalid if lacks]
    if lacking:
        print(
            f"logitjudge evaluate: {len(lacking)} of {len(rows)} rows have no `evaluator` field while "
            f"--evaluators is auto (first: {lacking[0]}); they are recorded as errors and retried on a "
            "resume: give them an `evaluator` field, or run every row with --evaluators NAMES "
            "(another --out, or --overwrite)",
            file=sys.stderr,
        )

    # Load (or ask the server) when there is work, or to check the engine when these model flags
    # (this server) were never seen to give the recorded engine (flags that passed the check are
    # added to the record).
    judge: JudgeLike | None = None
    client: EvaluateClient | None = None
    info: ServerInfo | None = None
    engine: dict[str, Any] | None = None
    flags_known = existing and record is not None and model_flags in (record.get("model_flags") or [])
    if pending or (existing and not flags_known):
        if server is not None:
            client = EvaluateClient(
                server,
                api_key=api_key,
                timeout=args.timeout if args.timeout is not None else DEFAULT_TIMEOUT,
                retries=args.retries if args.retries is not None else DEFAULT_RETRIES,
                engine_keys=ENGINE_KEYS,
                notify=lambda line: print(f"logitjudge evaluate: {line}", file=sys.stderr),
            )
            try:
                info = client.info()
            except ServerError as exc:
                client.close()
                return _fail(exc.message, _server_status(exc))
            engine = info.engine
            print(f"logitjudge evaluate: evaluating through {server}: {info.label()}", file=sys.stderr)
            if not info.described:
                print(
                    "logitjudge evaluate: the server does not describe its engine (GET /healthz), so the run "
                    "record names its model only and a resume can check no more than that",
                    file=sys.stderr,
                )
        else:
            try:
                judge = load_judge(args)
            except LogitJudgeError as exc:
                return _fail(f"cannot load the model: {exc.message}", 1)
            engine = _environment(judge)["engine"] or {}
        if existing and record is not None:
            if diffs := engine_differences(record.get("engine") or {}, engine):
                if client is not None:
                    client.close()
                return _refuse(out, diffs)
            if not flags_known:
                write_run_record(out, {**record, "model_flags": [*(record.get("model_flags") or []), model_flags]})

    writer = None
    if pending or invalid:
        if not existing:  # a new file (or --overwrite): its run record first, then the rows
            out.unlink(missing_ok=True)
            write_run_record(
                out,
                {
                    "format": RUN_RECORD_FORMAT,
                    "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "data": str(args.data),
                    "selection": selection,
                    "model_flags": [model_flags],  # every flag set seen to give this engine
                    "engine": engine,
                },
            )
        try:
            writer = ResultsWriter(out, retry_errors=set(ids))
        except DataError as exc:
            return _fail(str(exc))
        if writer.dropped_partial:
            print(
                f"logitjudge evaluate: dropped a partial last line ({writer.dropped_partial} bytes) of {out}",
                file=sys.stderr,
            )
    retried = [i for i in ids if i in errored]
    if resumed or retried:
        print(
            f"logitjudge evaluate: resumed {len(resumed)} of {len(rows)} rows from {out}"
            + (f"; retrying {len(retried)} rows that had errors" if retried else ""),
            file=sys.stderr,
        )
    for rid, why, _ in invalid:
        assert writer is not None
        writer.write({"id": rid, "results": {}, "passed": None, "error": why})

    started = time.monotonic()
    debiased: dict[str, int] = {}
    if pending and client is not None:
        assert writer is not None and info is not None
        bar = ItemProgress(len(rows), len(rows) - len(pending), len(pending), args.batch_size, args.no_progress)
        written = 0
        try:
            for k, answer in remote_results(
                client,
                [(rid, plan) for rid, _, plan in pending],
                registry=registry,
                thresholds=thresholds,
                model=args.request_model,
                batch_size=args.batch_size,
                # a server that leaves x_ fields out unless asked: ask, so the rows are a local run's
                extra={"x_strict_wire": False} if info.strict_wire else None,
            ):
                rid, raw, _ = pending[k]
                writer.write(_result_record(rid, raw, answer))
                written += 1
                usage = answer.get("usage")
                bar.item_written(tokens=usage.get("input_tokens", 0) if isinstance(usage, dict) else 0)
        except ServerError as exc:
            bar.close()
            writer.close()
            client.close()
            return _fail(
                f"{exc.message}\nlogitjudge evaluate: stopped after {written} of {len(pending)} rows; every "
                f"finished row is in {out}, and the same command resumes the run",
                _server_status(exc),
            )
        bar.close()
        client.close()
    elif pending:
        assert writer is not None and judge is not None
        bar = ItemProgress(len(rows), len(rows) - len(pending), len(pending), args.batch_size, args.no_progress)
        try:
            results = run_plans(
                bar.wrap(judge),
                (p for _, _, p in pending),
                model=args.request_model,
                thresholds=thresholds,
                batch_size=args.batch_size,
                registry=registry,
                debias=args.debias,
                debias_report=debiased,
            )
            for (rid, raw, _), res in zip(pending, results, strict=True):
                writer.write(_result_record(rid, raw, res))
                bar.item_written()
        except LogitJudgeError as exc:  # e.g. an unknown --request-model: nothing can run
            bar.close()
            writer.close()
            return _fail(f"{type(exc).__name__}: {exc.message}")
        bar.close()
        if args.debias == "batch":
            print(
                f"logitjudge evaluate: batch calibration: the prior of {debiased['questions']} choice/score "
                f"questions divided out of their {debiased['answers']} answers; {debiased['left']} questions "
                f"asked fewer than {MIN_BATCH} times left as answered",
                file=sys.stderr,
            )
    elapsed = time.monotonic() - started
    if writer is not None:
        writer.close()
    if client is not None:
        client.close()

    wanted = set(ids)
    latest = {str(r.get("id")): r for r in results_rows(out) if str(r.get("id")) in wanted}
    all_rows = list(latest.values())
    summary = summarize(all_rows, positive=args.positive)
    print_table(summary, wide=args.wide)
    produced_by = engine if engine is not None else (record or {}).get("engine")
    summary_record = {
        "command": " ".join(["logitjudge", "evaluate", *sys.argv[2:]])
        if sys.argv[1:2] == ["evaluate"]
        else " ".join(sys.argv),
        "data": str(args.data),
        "out": str(out),
        "run_record": str(run_record_path(out)),
        "config": {
            "evaluators": names,
            "model": args.model,
            "server": server,
            "request_model": args.request_model,
            "batch_size": args.batch_size,
            "thresholds": thresholds,
            "positive": args.positive,
            "limit": args.limit,
            "debias": args.debias,
            "low_option_mass_threshold": LOW_OPTION_MASS,
        },
        "environment": (
            _environment(judge) if judge is not None else _server_environment(info) if info is not None else None
        ),
        "engine": produced_by,
        "run": {
            "rows": len(rows),
            "done_before": len(resumed),
            "retried": len(retried),
            "ran": len(pending),
            "invalid_rows": len(invalid),
            "model_loaded": judge is not None,
            "server": server,
            "elapsed_s": round(elapsed, 3),
            "items_per_s": round(len(pending) / elapsed, 3) if pending and elapsed > 0 else None,
            "debias": {"mode": args.debias, **debiased},
        },
        "summary": {k: v.model_dump(mode="json") for k, v in summary.items()},
    }
    summary_path.write_text(
        json.dumps(summary_record, indent=2, ensure_ascii=False, allow_nan=False, default=str) + "\n",
        encoding="utf-8",
    )
    print(f"results: {out} ({len(all_rows)} rows)   summary: {summary_path}")
    if args.report:
        from logitjudge.rubrics.report import build_report

        meta = {"data": args.data, "results": out, "evaluators": ",".join(names), "rows": len(all_rows)}
        Path(args.report).write_text(
            build_report(
                summary,
                all_rows,
                title=f"logitjudge evaluate: {Path(args.data).name}",
                meta=meta,
                engine=produced_by,
                sources=dict(zip(ids, rows, strict=True)),
            ),
            encoding="utf-8",
        )
        print(f"report: {args.report}")
    return 0


def _result_record(rid: str, raw: Mapping[str, Any], res: Any) -> dict[str, Any]:
    """The results-file row of one item: its result (an ``ItemResult``, or a server's record of
    one as :func:`~logitjudge.cli.remote.remote_results` gives it), id, dataset evaluator, gold
    and lengths."""
    record = dict(res) if isinstance(res, Mapping) else res.model_dump(mode="json", exclude_none=True)
    record["id"] = rid
    if isinstance(raw.get("evaluator"), str):
        record["evaluator"] = raw["evaluator"]
    gold = gold_of(raw)
    if not gold.is_empty():
        record["gold"] = gold.model_dump(mode="json")
    record["x_lengths"] = text_lengths(raw)
    return record


def main(argv: list[str] | None = None) -> int:
    """``python -m logitjudge.cli.evaluate DATA ...``: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="logitjudge")
    sub = parser.add_subparsers(dest="command", required=True)
    add_evaluate_parser(sub)
    args = parser.parse_args(["evaluate", *(sys.argv[1:] if argv is None else argv)])
    return run_subcommand(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
