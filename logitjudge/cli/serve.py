"""``logitjudge serve``: load a model and serve the System One API with uvicorn.

::

    logitjudge serve                                   # default model on http://127.0.0.1:8000
    LOGITJUDGE_API_KEYS=k1,k2 logitjudge serve         # keys from the environment
    logitjudge serve --api-keys-file /etc/logitjudge/keys   # one key per line (also LOGITJUDGE_API_KEYS_FILE)
    logitjudge serve --model ./my-model --port 9000 --api-key KEY1   # works, but see below
    logitjudge serve --strict-wire                     # answers without x_ fields (closed-schema clients)

A key given with ``--api-key`` is on the command line, which every user of the machine can read
(``ps``, ``/proc/<pid>/cmdline``), so the server logs a WARNING at start when keys came that way;
use ``LOGITJUDGE_API_KEYS`` or a key file (readable by the server's user only) instead.

The main CLI (:mod:`logitjudge.cli`) calls :func:`add_serve_parser` and :func:`run_serve`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from typing import Any

from logitjudge.cli.common import add_model_args, fail, load_failure, load_judge, positive_int
from logitjudge.cli.config_args import add_config_argument, config_values
from logitjudge.engine.config import VLLM_CONCURRENT_BATCHES
from logitjudge.errors import ConfigurationError, LogitJudgeError, RequestError
from logitjudge.server.config import ACCELERATOR_BATCHING, CPU_BATCHING, ServerConfig

__all__ = ["add_serve_parser", "run_serve", "resolve_api_keys"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

logger = logging.getLogger("logitjudge.server")


def _size(n: int) -> str:
    """``16777216 -> "16 MiB"`` (whole MiB or KiB where exact, else bytes)."""
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def _port(text: str) -> int:
    """An ``argparse`` type: a TCP port, 1..65535."""
    port = positive_int(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {port}")
    return port


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` sub-command to an ``argparse`` sub-parsers object; returns its parser."""
    p = subparsers.add_parser(
        "serve",
        help="serve the System One API (POST /v1/systemone) and the evaluator API (POST /api/v1/evaluate) over HTTP",
        description="Serve POST /v1/systemone, POST /api/v1/evaluate, GET /v1/models, /healthz, /metrics and /docs.",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=_port, default=8000, help="port, 1-65535 (default 8000)")
    p.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help="require Authorization: Bearer KEY (repeatable). Visible to every local user in ps: "
        "prefer LOGITJUDGE_API_KEYS (comma-separated) or --api-keys-file",
    )
    p.add_argument(
        "--api-keys-file",
        default=None,
        metavar="PATH",
        help="require a key listed in PATH (one per line, # comments; also LOGITJUDGE_API_KEYS_FILE)",
    )
    # Defaults and help from ServerConfig's fields (cli.config_args): the one set of server defaults.
    add_config_argument(p, ServerConfig, "max_queue", type=positive_int)
    add_config_argument(
        p,
        ServerConfig,
        "max_num_batched_tokens",
        default=None,
        type=positive_int,
        help_suffix=f"(default: {CPU_BATCHING[0]} on CPU, {ACCELERATOR_BATCHING[0]} on GPU; the engine's row "
        "budget is --engine-row-tokens)",
    )
    add_config_argument(
        p,
        ServerConfig,
        "max_batch_requests",
        default=None,
        type=positive_int,
        help_suffix=f"(default: {CPU_BATCHING[1]} on CPU, {ACCELERATOR_BATCHING[1]} on GPU)",
    )
    add_config_argument(
        p,
        ServerConfig,
        "max_concurrent_batches",
        default=None,
        type=positive_int,
        help_suffix=f"(default: 1 on the transformers backend, {VLLM_CONCURRENT_BATCHES} on vllm)",
    )
    add_config_argument(
        p,
        ServerConfig,
        "max_body_bytes",
        type=positive_int,
        help_suffix=f"(default {_size(ServerConfig.max_body_bytes)})",
    )
    for name in ("max_questions", "max_items", "max_text_chars"):
        add_config_argument(p, ServerConfig, name, type=positive_int)
    add_config_argument(p, ServerConfig, "drain_timeout")
    add_config_argument(p, ServerConfig, "strict_wire", help_suffix="(default: off)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    add_model_args(p)  # the one set of model flags (and loader) of every subcommand
    p.set_defaults(func=run_serve)
    return p


def resolve_api_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """The API keys of ``serve``: ``--api-key``, ``--api-keys-file``, then the environment
    (``LOGITJUDGE_API_KEYS``, ``LOGITJUDGE_API_KEYS_FILE``), de-duplicated in that order.

    Logs a WARNING (never a key) when any came from ``--api-key``: command lines are public.

    Raises:
        OSError: a key file cannot be read (the server refuses to start rather than run open).
    """
    from logitjudge.settings import api_keys_from_env, read_api_keys_file

    from_file = read_api_keys_file(args.api_keys_file) if args.api_keys_file else ()
    if args.api_key:
        logger.warning(
            "%d API key(s) given with --api-key: a command line is visible to every user of this "
            "machine (ps, /proc/<pid>/cmdline); set LOGITJUDGE_API_KEYS or use --api-keys-file instead",
            len(args.api_key),
        )
    return tuple(dict.fromkeys([*args.api_key, *from_file, *api_keys_from_env()]))


def _run_uvicorn(config: Any, started: float) -> None:
    """``uvicorn.run`` for an app object, logging ``ready`` once the socket listens.

    Raises:
        SystemExit: 3 (uvicorn's start-up failure status) when the server could not start
            (e.g. the port is taken), as ``uvicorn.run`` does.
    """
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                logger.info(
                    "ready: accepting requests on http://%s:%d, %.1f s after the start",
                    config.host,
                    config.port,
                    time.monotonic() - started,
                )

    server = Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if not server.started:
        raise SystemExit(3)


def run_serve(args: argparse.Namespace) -> int:
    """Load the model, build the app and run uvicorn until interrupted; returns the exit code."""
    import uvicorn

    from logitjudge.server.app import create_app

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("logitjudge").setLevel(args.log_level.upper())  # also under the main CLI's config
    # Everything that can be refused is refused before the model loads (exit 2, no traceback).
    try:
        keys = resolve_api_keys(args)
    except OSError as exc:
        return fail(f"--api-keys-file: cannot read the keys: {exc}")
    # the scheduler's batching fields are None here when the device picks them (create_app)
    server_options = {k: v for k, v in config_values(args, ServerConfig).items() if v is not None}
    try:
        ServerConfig(api_keys=keys, **server_options)
    except ValueError as exc:
        return fail(f"serve: {exc}")
    loading = time.monotonic()
    try:
        judge = load_judge(args)
    except (RequestError, ConfigurationError) as exc:  # a bad --model, --device, --dtype, --backend, --calibration
        return fail(f"{load_failure(exc)}: {exc.message}", exc.error_type)
    except LogitJudgeError as exc:
        return fail(f"{load_failure(exc)}: {exc.message}", exc.error_type, status=1)
    app = create_app(judge, api_keys=keys, **config_values(args, ServerConfig))
    # Never log the keys themselves, only how many there are.
    logger.info(
        "serving %s on http://%s:%d (auth %s%s); the model loaded and self-checked in %.1f s",
        judge.model_name,
        args.host,
        args.port,
        f"on, {len(keys)} key(s)" if keys else "off",
        ", strict wire: no x_ fields" if args.strict_wire else "",
        time.monotonic() - loading,
    )
    # SIGTERM / Ctrl-C: uvicorn stops accepting, finishes open requests, the app drains its queue,
    # then uvicorn re-raises the signal. Our handlers receive that re-raise, so a drained shutdown
    # exits 0 (not -15 / KeyboardInterrupt): the process did what it was asked.
    stopped_by: list[int] = []
    previous = {sig: signal.signal(sig, lambda sig, _frame: stopped_by.append(sig)) for sig in _STOP_SIGNALS}
    try:
        _run_uvicorn(
            uvicorn.Config(
                app,
                host=args.host,
                port=args.port,
                log_level=args.log_level,
                timeout_graceful_shutdown=max(1, round(args.drain_timeout)),
            ),
            loading,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        close = getattr(judge, "close", None)  # a --judge-factory judge may have none
        if close is not None:
            close()  # the vLLM backend's engine processes
    abandoned = app.state.scheduler.engine_calls_running
    if abandoned:
        # The drain timed out with the engine mid-forward: its answers have no one to go to, and
        # waiting for the thread (as the interpreter would at exit) can take minutes on a CPU.
        logger.warning(
            "the drain timed out (--drain-timeout %g s) with %d engine call(s) still running; "
            "exiting without waiting for them",
            args.drain_timeout,
            abandoned,
        )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    if stopped_by:
        logger.info("stopped by %s after draining", signal.Signals(stopped_by[0]).name)
    return 0
