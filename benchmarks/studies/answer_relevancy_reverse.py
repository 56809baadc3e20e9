"""Does the question's likelihood given the answer tell WikiEval's good answers from its poor ones?

::

    python benchmarks/studies/answer_relevancy_reverse.py [--model qwen2.5-coder-1.5b] [--pairs 12]

RAGAS scores answer relevancy by generating questions from the answer and comparing them with
the question asked (Es et al. 2024). Without generating, the engine's likelihood readout gives
the same idea: ``log P(question | answer)``, teacher-forced after the instruction "Write the
question that the answer in the state replies to.", per token, minus the same over the
content-free answer ``N/A`` (Zhao et al. 2021). If it separated the good answers from the poor
ones it would be a fourth feature for ``answer_relevancy@2``'s fitted levels.

It is measured on the fit rows only: the 48 levelled rows that version 2 was fitted on
(``benchmarks/fits/fit_answer_relevancy.py``, 12 WikiEval dev pairs, seed 0), so the 38 pairs
that version 2 is measured on stay unseen. Printed and written: the feature's mean and standard
deviation per level, and the share of the 12 pairs whose good answer has the higher value,
beside version 2's features ``answers_rel`` and ``complete_rel`` (as saved by the fit, fp32).
Writes ``benchmarks/results/answer-relevancy-reverse-<model>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results, fits/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fits"))
from _results import RESULTS, run_metadata, write_result  # noqa: E402
from fit_answer_relevancy import derived_rows  # noqa: E402

from logitjudge.engine.types import EngineRequest, Option, Question  # noqa: E402

INSTRUCTIONS = "Write the question that the answer in the state replies to."
FIT = RESULTS / "answer-relevancy-fit-qwen2.5-coder-1.5b.json"
FEATURES = ("q_ll_rel", "q_ll", "answers_rel", "complete_rel")


def measure(judge: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row: ``q_ll`` (mean log-likelihood per token of the question after the output) and
    ``q_ll_rel`` (that minus the same after ``N/A``), one batch of engine calls."""
    requests = []
    for r in rows:
        question = Question("continuation", INSTRUCTIONS, (Option(r["input"]),), calibrated=False)
        requests += [EngineRequest(f"Answer: {r['output']}", (question,)), EngineRequest("Answer: N/A", (question,))]
    results = judge.answer_many(requests)
    out = []
    for i, r in enumerate(rows):
        own, null = results[2 * i].answers[0], results[2 * i + 1].answers[0]
        q_ll = own.log_likelihood / own.tokens
        out.append({**r, "q_ll": q_ll, "q_ll_rel": q_ll - null.log_likelihood / null.tokens})
    return out


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_id = {r["id"]: r for r in rows}
    pairs = sorted({r["pair"] for r in rows})
    return {
        "by_level": {
            f: {
                str(level): {
                    "mean": float(np.mean([r[f] for r in rows if r["level"] == level])),
                    "sd": float(np.std([r[f] for r in rows if r["level"] == level])),
                }
                for level in range(4)
            }
            for f in FEATURES
        },
        "pairwise_answer_over_poor": {
            f: float(np.mean([by_id[f"{p}:answer"][f] > by_id[f"{p}:poor_answer"][f] for p in pairs])) for f in FEATURES
        },
        "n_rows": len(rows),
        "n_pairs": len(pairs),
    }


def markdown(record: dict[str, Any]) -> str:
    figs = record["figures"]
    lines = [
        f"# answer_relevancy: the question's likelihood given the answer ({record['model']})",
        "",
        f"{figs['n_rows']} levelled rows of the {figs['n_pairs']} WikiEval dev pairs version 2 was fitted on "
        "(none of the 38 pairs it is measured on). Mean (sd) per level; pairwise: share of pairs whose good "
        "answer has the higher value.",
        "",
        "| feature | level 0 | level 1 | level 2 | level 3 | pairwise good > poor |",
        "|---|---|---|---|---|---|",
    ]
    for f in FEATURES:
        cells = [
            f"{figs['by_level'][f][str(k)]['mean']:.2f} ({figs['by_level'][f][str(k)]['sd']:.2f})" for k in range(4)
        ]
        lines.append(f"| {f} | " + " | ".join(cells) + f" | {figs['pairwise_answer_over_poor'][f]:.2f} |")
    meta = record["metadata"]
    lines += [
        "",
        f"Measured {meta['date']} at {meta['git_sha']}; {record['seconds']:.0f} s on {meta['device_name']}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model name or path (default: the default model)")
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    from logitjudge import Judge

    saved = {r["id"]: r["features"] for r in json.loads(FIT.read_text(encoding="utf-8"))["rows"]}
    rows = [{**r, **saved[r["id"]]} for r in derived_rows(args.pairs, seed=0)]
    judge = Judge.load(args.model)
    t0 = time.monotonic()
    measured = measure(judge, rows)
    record = {
        "command": "python benchmarks/studies/answer_relevancy_reverse.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "model": judge.model_name,
        "engine": json.loads(json.dumps(judge.describe(), default=str)),
        "instructions": INSTRUCTIONS,
        "figures": figures(measured),
        "rows": [{k: r[k] for k in ("id", "pair", "level", *FEATURES)} for r in measured],
        "seconds": time.monotonic() - t0,
        "metadata": run_metadata(device=str(judge.describe().get("device", "cpu"))),
    }
    md = write_result(
        args.out_dir, f"answer-relevancy-reverse-{judge.model_name.split('/')[-1].lower()}", record, markdown(record)
    )
    print(md.read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
