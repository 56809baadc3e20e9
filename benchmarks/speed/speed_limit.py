"""Speed against the physical limit and the best open peer, side by side in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed/speed_limit.py --threads 2 \
        --shapes 266x6,1983x16,2000x4,2000x64,8000x16 --repeats 3 --peer any2jev

For each request shape (state tokens x questions, the question mix of ``benchmarks/speed/speed.py``:
noul, choice of 4, score of 4 in turn; ``2000x16n``: 16 short noul questions), on the same model, interleaved round robin (a, b, c, a,
b, c, ...) so the noise of this shared machine falls on every contender alike:

- ``naive``: one full causal forward per question (``separate``), where affordable;
- ``packed``, ``prefix_packed``: the strategies forced;
- ``auto``: the default, with the state cache emptied before each run (a state never seen);
- ``auto_warm``: the same request again with its state in the state cache (a repeated state);
- ``plain``: one ordinary causal forward over as many tokens as ``auto`` runs (random ids, no
  mask, no readout): the limit a packed pass can reach;
- ``lean`` and ``lean_plain``: ``auto`` with the lean prompt ``lj-prompt-2`` (fewer tokens per
  question) and the plain forward of its token count;
- ``any2jev`` (``--peer any2jev``; ``make peer-env``): any2jev 0.1.0 (PyPI) serving the same
  weights in its own venv, the same request over HTTP on loopback (wall seconds, its tokenizer,
  JSON and HTTP included) and its own ``latency_ms`` (the forward alone). Its head is untrained:
  only its speed counts. It cuts states above its ``--max-state`` (4,096) silently, so rows with
  a longer state are not sent to it.

Ours is timed through ``Engine.run_batch`` (tokenization, planning, forward, readout, answers).
Every contender: the median and the minimum of ``--repeats`` runs, after one warm-up. The
machine's load average is written beside each row. Prints a table and writes
``benchmarks/results/speed-limit-<device>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from speed import questions, round_robin_times, state_of

from logitjudge.engine.core import Engine
from logitjudge.engine.types import EngineRequest, Option, Question

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/: the result helper
from _results import RESULTS, run_metadata  # noqa: E402


def short_questions(n: int) -> tuple[Question, ...]:
    """N short yes/no questions (the repeated-state row: "16 short questions over a 2k state")."""
    return tuple(Question("noul", f"Is item {i} in the text?", (Option("true"), Option("false"))) for i in range(n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--shapes", default="266x6,1983x16,2000x4,2000x64,8000x16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (ours and the peer's)")
    ap.add_argument("--naive-max-tokens", type=int, default=40_000, help="skip naive above this many tokens")
    ap.add_argument("--peer", default="", choices=["", "any2jev"])
    ap.add_argument("--peer-max-state", type=int, default=4096)
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip", default="", help="comma-separated contenders not to time (e.g. packed,prefix_packed)")
    ap.add_argument("--append", action="store_true", help="add the rows to those already in --out (a later run)")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    engine = Engine.load(args.model, device=args.device, dtype=args.dtype, max_row_tokens=1 << 20)
    lean = Engine(engine.lm, engine.config.with_options(prompt_version="lj-prompt-2"))
    peer = None
    if args.peer == "any2jev":
        from peers import Any2JevPeer, wire_question

        peer = Any2JevPeer(args.model, threads=args.threads, max_state=args.peer_max_state)
    warm = EngineRequest(state_of(engine, 64), questions(2))
    engine.run_batch([warm])
    lean.run_batch([warm])
    rows: list[dict[str, Any]] = []
    out = Path(args.out) if args.out else RESULTS / f"speed-limit-{engine.lm.device.type}.json"
    if args.append and out.exists():
        earlier = json.loads(out.read_text())
        rows = [{**r, "run": r.get("run", earlier["command"])} for r in earlier["rows"]]
    try:
        for shape in args.shapes.split(","):
            short = shape.endswith("n")  # "2000x16n": N short noul questions instead of the mix
            s, n = (int(x) for x in shape.rstrip("n").split("x"))
            state = state_of(engine, s)
            request = EngineRequest(state, short_questions(n) if short else questions(n))
            plan, lean_plan = engine.plan(request), lean.plan(request)
            naive_tokens = n * len(plan.prefix) + (plan.n_tokens - len(plan.prefix))
            ids = torch.randint(100, 1000, (1, plan.n_tokens))
            lean_ids = torch.randint(100, 1000, (1, lean_plan.n_tokens))

            def plain(ids: torch.Tensor = ids) -> None:
                with torch.inference_mode():
                    engine.runner.decoder(input_ids=ids.to(engine.lm.device))

            def cold(e: Engine = engine, r: EngineRequest = request, strategy: str = "auto") -> None:
                e.state_cache.clear()  # a state never seen
                e.run_batch([r], strategy)

            fns: dict[str, Callable[[], Any]] = {
                "packed": lambda r=request: engine.run_batch([r], "packed"),
                "prefix_packed": lambda r=request: cold(engine, r, "prefix_packed"),
                "auto": cold,
                "auto_warm": lambda r=request: engine.run_batch([r]),
                "plain": plain,
                "lean": lambda r=request: cold(lean, r),
                "lean_plain": lambda ids=lean_ids: plain(ids),
            }
            if naive_tokens <= args.naive_max_tokens:
                fns["naive"] = lambda r=request: engine.run_batch([r], "separate")
            for name in filter(None, args.skip.split(",")):
                fns.pop(name, None)
            peer_ms: list[float] = []
            peer_seen: dict[str, Any] = {}
            if peer is not None and s + 8 <= args.peer_max_state:
                wire = [wire_question(q) for q in request.questions]

                def ask_peer(
                    wire: list[dict[str, Any]] = wire,
                    state: str = state,
                    ms: list[float] = peer_ms,
                    seen: dict[str, Any] = peer_seen,
                ) -> None:
                    _, out = peer.answer(state, wire)
                    ms.append(float(out.get("latency_ms") or 0.0))
                    seen["tokens"] = (out.get("usage") or {}).get("input_tokens")

                ask_peer()  # warm-up
                peer_ms.clear()
                fns["any2jev"] = ask_peer
            engine.run_batch([request])  # warm-up, and auto_warm's state goes into the cache
            lean.run_batch([request])
            repeats = {k: args.repeats for k in fns}
            if naive_tokens > 30_000:
                repeats["naive"] = 1
            load_before = os.getloadavg()[0]
            times = round_robin_times(fns, repeats)
            # which paths auto took, cold and warm
            engine.state_cache.clear()
            cold_paths = engine.runner.run([plan], "auto").paths
            warm_paths = engine.runner.run([plan], "auto").paths
            row: dict[str, Any] = {
                "run": "python benchmarks/speed/speed_limit.py "
                + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v not in (None, "", False)),
                "shape": shape,
                "question_mix": "noul" if short else "noul/choice/score",
                "state_tokens": len(plan.prefix),
                "questions": n,
                "tokens": plan.n_tokens,
                "lean_tokens": lean_plan.n_tokens,
                "naive_tokens": naive_tokens,
                "any2jev_tokens": peer_seen.get("tokens"),
                "branch_tokens_per_question": (plan.n_tokens - len(plan.prefix)) / n,
                "lean_branch_tokens_per_question": (lean_plan.n_tokens - len(lean_plan.prefix)) / n,
                "auto_paths": {"cold": cold_paths, "warm": warm_paths},
                "repeats": repeats,
                "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "seconds": times,
                "median_s": {k: statistics.median(v) for k, v in times.items()},
                "min_s": {k: min(v) for k, v in times.items()},
            }
            if peer_ms:
                row["any2jev_forward_ms"] = {"median": statistics.median(peer_ms), "min": min(peer_ms)}
            m = row["median_s"]
            row["ratios"] = {
                "auto_over_plain": m["auto"] / m["plain"],
                "lean_over_lean_plain": m["lean"] / m["lean_plain"],
                "warm_over_cold": m["auto_warm"] / m["auto"],
                "packed_over_plain": m["packed"] / m["plain"] if "packed" in m else None,
                "auto_over_any2jev": m["auto"] / m["any2jev"] if "any2jev" in m else None,
                "lean_over_any2jev": m["lean"] / m["any2jev"] if "any2jev" in m else None,
                "naive_over_auto": m["naive"] / m["auto"] if "naive" in m else None,
            }
            rows.append(row)
            print(fmt_row(row), flush=True)
            write(args, engine, rows)
    finally:
        if peer is not None:
            peer.close()
    print("\n" + write(args, engine, rows))


HEADER = (
    "| state | N | tokens: ours / lean / any2jev | tok/question: ours / lean | naive s | packed s | prefix_packed s "
    "| **auto** s | auto warm s | plain s | lean s | lean plain s | any2jev s (its forward) | auto / plain "
    "| lean / lean plain | warm / cold | auto / any2jev | lean / any2jev | load |"
)


def fmt_row(r: dict[str, Any]) -> str:
    m, lo, q = r["median_s"], r["min_s"], r["ratios"]

    def t(k: str) -> str:
        return f"{m[k]:.3f} ({lo[k]:.3f})" if k in m else "not run"

    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    peer = t("any2jev")
    if "any2jev_forward_ms" in r:
        peer = f"{m['any2jev']:.3f} ({r['any2jev_forward_ms']['median'] / 1000:.3f})"
    return (
        f"| {r['state_tokens']} | {r['questions']}{' noul' if r.get('question_mix') == 'noul' else ''} | {r['tokens']} / {r['lean_tokens']} / {r['any2jev_tokens'] or '-'} "
        f"| {r['branch_tokens_per_question']:.1f} / {r['lean_branch_tokens_per_question']:.1f} | {t('naive')} "
        f"| {t('packed')} | {t('prefix_packed')} | **{t('auto')}** | {t('auto_warm')} | {t('plain')} | {t('lean')} "
        f"| {t('lean_plain')} | {peer} | {x(q['auto_over_plain'])} | {x(q['lean_over_lean_plain'])} "
        f"| {x(q['warm_over_cold'])} | {x(q['auto_over_any2jev'])} | {x(q['lean_over_any2jev'])} "
        f"| {r['load_average_1m'][0]:.1f}-{r['load_average_1m'][1]:.1f} |"
    )


def write(args: argparse.Namespace, engine: Engine, rows: list[dict[str, Any]]) -> str:
    """Write the JSON record and the markdown table (after every row); return the table."""
    device = "cuda" if engine.lm.device.type == "cuda" else "cpu"
    record = {
        "command": "python benchmarks/speed/speed_limit.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v not in (None, "")),
        "metadata": run_metadata(device),
        "engine": engine.describe(),
        "environment": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    out = Path(args.out) if args.out else RESULTS / f"speed-limit-{device}.json"
    out.write_text(json.dumps(record, indent=2))
    sep = "|" + "|".join("---" for _ in range(HEADER.count("|") - 1)) + "|"
    table = "\n".join(
        [
            f"Model `{engine.name}` ({engine.describe()['dtype']}, {device}, {torch.get_num_threads()} threads); "
            "seconds: median (minimum) of the runs; load: 1-minute load average before-after the row.",
            "",
            HEADER,
            sep,
            *(fmt_row(r) for r in rows),
        ]
    )
    out.with_suffix(".md").write_text(table + "\n")
    return table


if __name__ == "__main__":
    main()
