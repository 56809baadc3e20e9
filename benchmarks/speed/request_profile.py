"""Where the time of a small request goes: a 6-question request over a ~300-token state.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed/request_profile.py [--model smollm2-135m] [--repeats 7]

Times each stage of ``POST /v1/systemone``'s path in-process, on the real model: JSON parsing
and pydantic validation, wire -> engine request, planning (tokenization, budgets), the forward
(``Runner.run`` with ``auto``), the readout (label log-probs and final distributions), answers and
the wire response, and JSON encoding. HTTP itself (uvicorn, the middleware) is not included.
Median of the runs after two warm-ups; prints a table and writes
``benchmarks/results/request-profile-<device>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from peers import wire_question
from speed import questions, state_of

from logitjudge.engine.types import Answer, EngineResult, Usage
from logitjudge.judge import Judge

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/: the result helper
from _results import RESULTS, run_metadata  # noqa: E402

STAGES = ("parse+validate", "to_engine", "plan", "forward", "readout", "answers+response", "json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--state-tokens", type=int, default=266)
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    judge = Judge.load(args.model, device="cpu", state_cache_mb=0)
    engine = judge.engine
    body = {
        "model": "jev-latest",
        "state": state_of(engine, args.state_tokens),
        "questions": {f"q{i}": wire_question(q) for i, q in enumerate(questions(args.questions))},
    }
    raw = json.dumps(body)
    times: dict[str, list[float]] = {k: [] for k in (*STAGES, "total")}
    for _ in range(args.repeats + 2):
        marks = [time.perf_counter()]
        req = judge.validate(json.loads(raw))
        marks.append(time.perf_counter())
        ereq = judge.to_engine(req)
        marks.append(time.perf_counter())
        plan = engine.plan(ereq)
        marks.append(time.perf_counter())
        reads = engine.runner.run([plan], "auto")
        marks.append(time.perf_counter())
        scores = engine.readout.log_probs(reads.hidden, reads.labels)
        dists = engine.readout.final_distributions(scores, reads.labels, [plan])
        marks.append(time.perf_counter())
        answers = tuple(
            Answer(qp.type, tuple(dists[(0, q)][0]), dists[(0, q)][1]) for q, qp in enumerate(plan.questions)
        )
        response = judge.to_response(req, EngineResult(answers, Usage(input_tokens=plan.n_tokens)))
        marks.append(time.perf_counter())
        response.model_dump_json()
        marks.append(time.perf_counter())
        for k, a, b in zip(STAGES, marks, marks[1:]):
            times[k].append(b - a)
        times["total"].append(marks[-1] - marks[0])
    median = {k: statistics.median(v[2:]) for k, v in times.items()}
    total = median["total"]
    lines = ["| stage | ms | share |", "|---|--:|--:|"]
    lines += [f"| {k} | {median[k] * 1000:.1f} | {100 * median[k] / total:.1f}% |" for k in (*STAGES, "total")]
    outside = 100 * (total - median["forward"]) / total
    lines.append(f"\nOutside the forward: {outside:.1f}% ({plan.n_tokens} tokens, paths {reads.paths}).")
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"request-profile-{engine.lm.device.type}.json"
    record = {
        "command": "python benchmarks/speed/request_profile.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "metadata": run_metadata(engine.lm.device.type),
        "engine": engine.describe(),
        "tokens": plan.n_tokens,
        "paths": reads.paths,
        "median_s": median,
        "outside_forward_share": outside / 100,
    }
    out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
