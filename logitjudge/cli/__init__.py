"""The ``logitjudge`` command line.

::

    logitjudge ask REQUEST.json [--model PATH_OR_ID]      # one POST /v1/systemone body -> response JSON
    logitjudge serve [--model ...] [--port 8000]           # the HTTP server
    logitjudge evaluate DATA.jsonl --evaluators RAG ...    # dataset evaluation
    logitjudge calibrate LABELLED.jsonl --out calib.json   # fit calibration; --calibration on ask/evaluate/serve
    logitjudge compare OURS.jsonl HOSTED.jsonl             # agreement of two result files of the same items
    logitjudge fit LABELLED.jsonl --out heads/             # train chunk_support's head; then --heads heads/

Errors are printed as ``{"detail": {"error_type", "message", "field"}}`` on stderr with exit
status 2 for a bad request and 1 for an engine failure (:mod:`logitjudge.cli.common`). The
package imports the rubrics and the server; nothing there imports it.
"""

from __future__ import annotations

import argparse
import logging

from logitjudge.cli.ask import add_ask_parser
from logitjudge.cli.calibrate import add_calibrate_parser
from logitjudge.cli.common import add_model_args, allow_downloads, load_judge, run_subcommand
from logitjudge.cli.compare import add_compare_parser
from logitjudge.cli.evaluate import add_evaluate_parser
from logitjudge.cli.fit import add_fit_parser
from logitjudge.cli.serve import add_serve_parser

__all__ = ["main", "build_parser", "add_model_args", "load_judge"]


def _examples() -> str:
    """The usage block of this module's docstring (its ``::`` paragraph), as plain lines."""
    block = (__doc__ or "").split("::", 1)[-1].split("\n\n")[1]
    return "\n".join("  " + line.strip() for line in block.splitlines() if line.strip())


def build_parser() -> argparse.ArgumentParser:
    """The ``logitjudge`` parser: one subcommand per module of this package."""
    parser = argparse.ArgumentParser(
        prog="logitjudge",
        description="An open, local LLM judge: probabilities read from an open model's next-token logits.\n"
        "Nothing touches a network unless --allow-download is given (or evaluate --server names a server).",
        epilog="examples:\n" + _examples(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        add_ask_parser,
        add_serve_parser,
        add_evaluate_parser,
        add_calibrate_parser,
        add_compare_parser,
        add_fit_parser,
    ):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    allow_downloads(args)  # offline switches set before anything imports the hub libraries
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    return run_subcommand(args)
