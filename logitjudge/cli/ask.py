"""``logitjudge ask REQUEST.json``: one ``POST /v1/systemone`` body from a file (or stdin) ->
the response JSON, exactly as the API returns it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from logitjudge.cli.common import add_model_args, error_json, fail, load_judge
from logitjudge.errors import ConfigurationError, LogitJudgeError, RequestError

__all__ = ["add_ask_parser", "cmd_ask"]


def add_ask_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``ask`` subcommand to the main CLI's subparsers."""
    ask = subparsers.add_parser("ask", help="answer one POST /v1/systemone body from a file (or - for stdin)")
    ask.add_argument("request", help="path to the request JSON, or - for stdin")
    ask.add_argument("--pretty", action="store_true", help="indent the JSON output")
    add_model_args(ask)
    ask.set_defaults(func=cmd_ask)
    return ask


def cmd_ask(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.request == "-" else Path(args.request).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return fail(f"{args.request}: cannot read the request: {exc}")
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        return fail(f"{args.request}: not JSON: {exc}")
    # Validate the body before loading the model: a bad request fails in a second, not after a load.
    from pydantic import ValidationError

    from logitjudge.contract.systemone import SystemOneRequest
    from logitjudge.judge import validation_error_to_request_error

    try:
        SystemOneRequest.model_validate(body)
    except ValidationError as exc:
        print(error_json(validation_error_to_request_error(exc)), file=sys.stderr)
        return 2
    judge = None
    try:
        judge = load_judge(args)
        response = judge.ask(body)
    except (RequestError, ConfigurationError) as exc:  # the request's, or a bad --device / --backend
        print(error_json(exc), file=sys.stderr)
        return 2
    except LogitJudgeError as exc:
        print(error_json(exc), file=sys.stderr)
        return 1
    finally:
        close = getattr(judge, "close", None)  # the vLLM backend's engine processes
        if close is not None:
            close()
    print(json.dumps(response, ensure_ascii=False, indent=2 if args.pretty else None, allow_nan=False))
    return 0
