"""``logitjudge fit ROWS... --evaluator chunk_support --out heads/``: train the head an evaluator
reads, for the model given by the model flags, from labelled rows (our row shape or RAGAS names;
JSONL, CSV or Parquet). The flags only parse and print; the work is :mod:`logitjudge.fit`."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from logitjudge.cli.common import add_model_args, error_json, fail, load_judge, positive_int
from logitjudge.errors import ConfigurationError, LogitJudgeError, RequestError

__all__ = ["add_fit_parser", "cmd_fit"]


def _bounded(low: float, high: float, what: str) -> Any:
    """An ``argparse`` type: a number in ``[low, high)`` (``nan`` refused), ``what`` in the message."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not low <= value < high:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    return parse


def _part(text: str) -> tuple[int, int]:
    """``K/N`` -> (K, N) with 1 <= K <= N."""
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise argparse.ArgumentTypeError(f"K/N with 1 <= K <= N (as 2/3), not {text!r}")
    return int(k), int(n)


def add_fit_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``fit`` subcommand to the main CLI's subparsers."""
    p = subparsers.add_parser(
        "fit",
        help="train the head (or, with --adapter, the branch adapter) an evaluator reads, from labelled rows",
        description="A head: features through the engine (cached), layer and regularisation by grouped "
        "cross-validation, a held-out report, and a head folder for `evaluate`/`serve --heads`. With --adapter: "
        "an activated LoRA on the question branches (the states' KV cached), checkpoints and resume, a held-out "
        "report, and an adapter folder for `evaluate`/`serve --adapters`.",
    )
    p.add_argument("rows", nargs="+", help="labelled rows: .jsonl, .csv or .parquet files")
    p.add_argument(
        "--evaluator",
        default="chunk_support",
        help="the evaluator whose head (or with --adapter, adapter) to train (name or name@version; "
        "default: %(default)s)",
    )
    p.add_argument(
        "--out",
        required=True,
        help="the folder the head is written into (as <out>/<head name>/); with --adapter <out>/<evaluator name>/",
    )
    p.add_argument(
        "--label-key",
        default="label",
        help="for an evaluator of one question over the item (e.g. faithfulness): the gold field holding the label "
        "(a bool for yes/no, an option name or a level index; default: %(default)s)",
    )
    p.add_argument(
        "--sample",
        type=positive_int,
        default=None,
        help="a seeded sample of this many rows, stratified by source and label (default: every row)",
    )
    p.add_argument(
        "--layers",
        default=None,
        help="comma-separated layers to tap, 1..N (default: N/2, 5N/7, 6N/7 and N "
        "of an N-layer model); cross-validation chooses one, or all of them",
    )
    p.add_argument(
        "--holdout", type=float, default=0.2, help="share of the row groups held out for the report (default 0.2)"
    )
    p.add_argument("--folds", type=positive_int, default=5, help="grouped cross-validation folds (default 5)")
    p.add_argument("--cache", default=None, help="feature cache folder (default: <out>/.features)")
    p.add_argument("--batch-size", type=positive_int, default=8, help="examples per engine pass (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and the held-out split")
    p.add_argument(
        "--balance-classes",
        action="store_true",
        help="weigh each option by the inverse of its share of the training examples, so the head's probabilities "
        "assume equal priors (P = 0.5 does not assume your rows' share of each option)",
    )
    g = p.add_argument_group("adapter", "with --adapter: train a branch adapter (activated LoRA) instead of a head")
    g.add_argument(
        "--adapter",
        action="store_true",
        help="train an adapter on the question's branch (its folder is PEFT's format plus our binding)",
    )
    g.add_argument("--rank", type=positive_int, default=16, help="LoRA rank r (default 16)")
    g.add_argument("--alpha", type=positive_int, default=32, help="lora_alpha; scaling alpha / r (default 32)")
    g.add_argument(
        "--adapt-layers", type=int, default=8, help="adapt the top this-many decoder layers (0: all; default 8)"
    )
    g.add_argument(
        "--lr",
        type=float,
        default=2e-4,
        help="AdamW's peak learning rate, after a linear warm-up, decaying linearly toward 0 (default 2e-4)",
    )
    g.add_argument(
        "--warmup",
        type=_bounded(0.0, 1.0, "a share of the steps in [0, 1)"),
        default=0.1,
        help="share of the steps the rate warms up over (default 0.1)",
    )
    g.add_argument(
        "--max-grad-norm",
        type=_bounded(0.0, float("inf"), "0 (off) or more"),
        default=1.0,
        help="clip the gradients' L2 norm to this (0: off; default 1.0)",
    )
    g.add_argument("--epochs", type=positive_int, default=1, help="passes over the training rows (default 1)")
    g.add_argument(
        "--branches-per-step",
        type=positive_int,
        default=16,
        help="branches (rows) per forward and backward; many share one read of the weights (default 16)",
    )
    g.add_argument(
        "--max-train-rows",
        type=positive_int,
        default=None,
        help="train on at most this many of the training rows (seeded; the held-out rows do not change)",
    )
    g.add_argument(
        "--train-rows",
        nargs="+",
        default=[],
        metavar="ROWS",
        help="more labelled rows (files) that only train: the held-out rows are drawn from the positional rows "
        "alone, so the report is on the rows a run without these (or a head fitted on the same rows, "
        "--sample and --seed) reports on; rows of a held-out group or already among the rows are left out",
    )
    g.add_argument(
        "--train-sample",
        type=positive_int,
        default=None,
        help="a seeded sample of this many --train-rows, stratified by source and label, drawn before the rows "
        "of a held-out group or already among the rows are left out (default: every row)",
    )
    g.add_argument(
        "--train-part",
        type=_part,
        default=None,
        metavar="K/N",
        help="train on the K-th of N seeded, disjoint parts of the training rows (the held-out rows do not "
        "change): a pass too long for one sitting as N runs, each with --init-adapter from the last; once "
        "all N have trained, they may run again as a next pass",
    )
    g.add_argument(
        "--init-adapter",
        default=None,
        metavar="DIR",
        help="start from this adapter folder's weights instead of a new adapter (ours, of the same rank, alpha, "
        "layers, model, prompt and evaluator version, or PEFT's activated LoRA of the same rank, alpha and "
        "modules); its training is recorded in the new one's binding and card",
    )
    g.add_argument(
        "--report-rows", type=positive_int, default=None, help="report on at most this many held-out rows (seeded)"
    )
    g.add_argument(
        "--work",
        default=None,
        help="the states' KV cache (bf16, on disk) and the checkpoint; a re-run resumes (default: <out>/.adapter)",
    )
    add_model_args(p)
    p.set_defaults(func=cmd_fit)
    return p


def cmd_fit(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from logitjudge.engine.adapters import SHIPPED as SHIPPED_ADAPTERS
    from logitjudge.fit import default_layers, extract, fit_head, head_examples, write_head
    from logitjudge.rubrics.dataio import DataError, read_rows
    from logitjudge.rubrics.kinds import kind_of
    from logitjudge.rubrics.registry import default_registry
    from logitjudge.rubrics.samples import stratified_sample

    if args.adapters != SHIPPED_ADAPTERS:  # the default: fit loads none (a head reads the base model's question)
        return fail("--adapters is for evaluate and serve: fit loads no adapter (start one with --init-adapter)")
    if (args.train_rows or args.train_sample) and not args.adapter:
        return fail("--train-rows and --train-sample train an adapter: add --adapter")
    if (args.train_part or args.init_adapter is not None) and not args.adapter:
        return fail("--train-part and --init-adapter train an adapter: add --adapter")
    if args.train_sample and not args.train_rows:
        return fail("--train-sample samples --train-rows: name the files with --train-rows")

    def sampled(paths: list[str], sample: int | None) -> list[Any]:
        """The rows of ``paths``; with ``sample``, a seeded stratified sample of that many."""
        rows: list[Any] = [row for path in paths for row in read_rows(path)]
        return stratified_sample(rows, sample, seed=args.seed) if sample is not None and sample < len(rows) else rows

    try:
        rows = sampled(args.rows, args.sample)
    except (OSError, DataError) as exc:
        return fail(f"cannot read the rows: {exc}")
    try:
        extra_rows = sampled(args.train_rows, args.train_sample)
    except (OSError, DataError) as exc:
        return fail(f"--train-rows: cannot read the rows: {exc}")
    if not 0 <= args.holdout < 1:
        return fail(f"--holdout: a share in [0, 1), not {args.holdout}")
    try:
        defn = default_registry().get(args.evaluator)
        examples = head_examples(defn, rows, label_key=args.label_key)
        train_only = head_examples(defn, extra_rows, label_key=args.label_key)
    except (LogitJudgeError, ValueError) as exc:
        return fail(f"--evaluator {args.evaluator}: {exc}")
    if extra_rows and not train_only:
        return fail(f"--train-rows: no row has a gold label {defn.name} can train on")
    if not examples:
        wanted = kind_of(defn).head_gold if defn.head is not None else f"gold.{args.label_key}"
        hint = "" if defn.head is not None else "; --label-key names the gold field holding the label"
        return fail(f"no row has a gold label {defn.name} can train on ({wanted}{hint})")
    args.heads = "none"  # the states a head reads do not depend on other heads
    args.adapters = "none"  # a head reads the base model's question; an adapter trains from its own start
    if args.adapter:
        return _fit_adapter(args, defn, examples, train_only)
    t0 = time.monotonic()
    try:
        judge = load_judge(args)
        engine = judge.engine
        layers = [int(x) for x in args.layers.split(",")] if args.layers else default_layers(engine.runner.n_layers)
        cache = Path(args.cache) if args.cache else Path(args.out) / ".features"
        with tqdm(total=len(examples), desc="features", unit="ex", file=sys.stderr) as bar:
            features = extract(
                engine, examples, layers=layers, cache=cache, batch_size=args.batch_size, progress=bar.update
            )
        t_feat = time.monotonic() - t0
        result = fit_head(
            defn,
            examples,
            features,
            engine.describe(),
            holdout=args.holdout,
            folds=args.folds,
            seed=args.seed,
            balance=args.balance_classes,
        )
    except (LogitJudgeError, ValueError) as exc:
        return _failed(exc)
    timing = {
        "features_s": round(t_feat, 1),
        "examples_computed": features.computed,
        "examples_cached": len(examples) - features.computed,
        "total_s": round(time.monotonic() - t0, 1),
    }
    folder = write_head(result, Path(args.out), timing=timing, data=[str(p) for p in args.rows])
    print(json.dumps({"head": str(folder), **result.head.meta, "timing": timing}, indent=2))
    return 0


def _failed(exc: LogitJudgeError | ValueError) -> int:
    """Exit 2 for a request or configuration error (its JSON on stderr) or bad data, 1 for any
    other error of ours."""
    if isinstance(exc, ValueError):
        return fail(str(exc))
    print(error_json(exc), file=sys.stderr)
    return 2 if isinstance(exc, (RequestError, ConfigurationError)) else 1


def _fit_adapter(args: argparse.Namespace, defn: Any, examples: list[Any], train_only: list[Any]) -> int:
    """``fit --adapter``: :func:`logitjudge.fit.adapters.train_adapter`, then its folder under ``--out``."""
    from tqdm import tqdm

    from logitjudge.fit.adapter_parts import check_init_folder, training_rows
    from logitjudge.fit.adapter_steps import split_with_train_only
    from logitjudge.fit.adapters import AdapterTrainingConfig, train_adapter, write_adapter

    config = AdapterTrainingConfig(
        rank=args.rank,
        alpha=args.alpha,
        layers=args.adapt_layers,
        lr=args.lr,
        warmup=args.warmup,
        max_grad_norm=args.max_grad_norm,
        epochs=args.epochs,
        batch_size=args.branches_per_step,
        seed=args.seed,
        holdout=args.holdout,
        max_rows=args.max_train_rows,
        report_rows=args.report_rows,
        part=args.train_part,
        init=args.init_adapter,
    )
    if config.init is not None:
        try:  # before the model loads: a wrong folder fails in a second
            check_init_folder(config.init, config, f"{defn.name}@{defn.version}")
        except LogitJudgeError as exc:
            return fail(f"--init-adapter: {exc}")
        except ValueError as exc:
            return fail(str(exc))
    args.heads = "shipped"  # a head shipped for this question is reported beside the adapter
    args.state_cache_mb = 0  # training keeps states' KV on disk (--work), not in the serving cache
    work = Path(args.work) if args.work else Path(args.out) / ".adapter"

    # Ctrl-C or SIGTERM (`kill`, a scheduler's stop) ends the run after the step it is in, so the
    # checkpoint holds whole steps; a second one stops at once (the last checkpoint resumes)
    asked = [False]

    def stop(signum: int, frame: Any) -> None:
        if asked[0]:
            raise KeyboardInterrupt
        asked[0] = True
        os.write(2, b"\nstopping after this step, with a checkpoint (again: stop now)\n")  # print is not re-entrant

    def check() -> None:
        if asked[0]:
            raise KeyboardInterrupt

    _, train, test, _ = split_with_train_only(examples, train_only, args.holdout, args.seed)
    try:
        n_train = len(training_rows(train, config)[1])
    except ValueError as exc:
        return _failed(exc)
    main_thread = threading.current_thread() is threading.main_thread()  # only it may set a handler
    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
    try:
        judge = load_judge(args)
        n_report = min(len(test), args.report_rows or len(test))
        report_bar = tqdm(total=n_report, desc="held-out", unit="row", file=sys.stderr, delay=1)
        with report_bar, tqdm(total=n_train * args.epochs, desc="adapter", unit="row", file=sys.stderr) as bar:
            tokens = [0, time.monotonic()]

            def step(rows: int, info: dict[str, Any]) -> None:
                tokens[0] += info["tokens"]
                rate = tokens[0] / max(1e-9, time.monotonic() - tokens[1])
                bar.set_postfix(loss=f"{info['loss']:.3f}", tok_s=f"{rate:.0f}")
                bar.update(rows)
                check()  # after the step's state is recorded: a checkpoint now holds it whole

            def reported(rows: int) -> None:
                report_bar.update(rows)
                check()

            head = (
                defn.head.name if defn.head is not None and defn.head.name in judge.engine.describe()["heads"] else None
            )
            result = train_adapter(
                judge.engine,
                examples,
                config,
                evaluator=f"{defn.name}@{defn.version}",
                work=work,
                progress=step,
                compare_head=head,
                log=lambda line: print(line, file=sys.stderr),
                report_progress=reported,
                train_only=train_only,
            )
    except KeyboardInterrupt:
        if (work / "checkpoint.pt").exists():
            print(f"interrupted: the checkpoint in {work} resumes this run", file=sys.stderr)
        else:
            print("interrupted before the first checkpoint: nothing to resume", file=sys.stderr)
        return 130
    except (LogitJudgeError, ValueError) as exc:
        return _failed(exc)
    finally:
        for sig, handler in before.items():
            if handler is not None:  # None: set outside Python, cannot be put back
                signal.signal(sig, handler)
    folder = write_adapter(result, Path(args.out), data=[str(p) for p in [*args.rows, *args.train_rows]])
    print(json.dumps({"adapter": str(folder), "trained": result.trained, "metrics": result.metrics}, indent=2))
    return 0
