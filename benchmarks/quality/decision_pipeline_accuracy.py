"""Choice and score accuracy: logitjudge against transformers' ``pipeline("decision")``, same weights, same items.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/quality/decision_pipeline_accuracy.py [--model qwen2.5-coder-1.5b]
        [--per-cell 15] [--seed 0]

What it answers: on the labelled typed dev sets (``sys1bench_canary`` and ``jevbench``, choice and
score questions), is logitjudge's answer as often right as the pipeline's? Each item is one wire
request (its state, its one question with the set's options or levels), answered by:

- ``pipeline``: ``pipeline("decision", model=..., tokenizer=...)`` with its generic prompt (the
  question as the user turn of the model's chat template, lettered options and levels), one
  forward pass per question;
- ``default``: logitjudge as ``logitjudge serve`` answers (its own prompt; a choice in every
  rotation of its canonical order, a score in every rotation of its listing, up to 8);
- ``single``: logitjudge with one order (``x_rotations: 1``), the earlier default.

All three share one loaded copy of the weights (fp32). The predicted answer is the most probable
option (a score: level); accuracy per set and question type and pooled per type, the score's
mean absolute error in levels, and the paired difference of each logitjudge contender's accuracy
against the pipeline's with a 95% bootstrap interval over items (1,000 resamples, seed 0). Items:
a seeded sample of ``--per-cell`` per set and type (``rag_quality``-style: whole items, gold
``unknown`` left out). Writes ``benchmarks/results/decision-pipeline-accuracy-<model>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
from _results import DATA, RESULTS, run_metadata  # noqa: E402

SETS = ("sys1bench_canary", "jevbench")
TYPES = ("choice", "score")
CONTENDERS = ("pipeline", "default", "single")


def items(per_cell: int, seed: int, data: Path = DATA) -> list[dict[str, Any]]:
    """``per_cell`` seeded rows per (set, type) with a gold answer."""
    out = []
    for name in SETS:
        rows = [json.loads(line) for line in (data / name / "dev.jsonl").read_text(encoding="utf-8").splitlines()]
        for kind in TYPES:
            cell = [
                r
                for r in rows
                if (r.get("question") or {}).get("type") == kind and r["gold"].get("answer") != "unknown"
            ]
            random.Random(seed).shuffle(cell)
            out += [dict(r, set=name) for r in cell[:per_cell]]
    return out


def body(row: dict[str, Any]) -> dict[str, Any]:
    """The item's System One request: its state and its one question ``q``."""
    q = row["question"]
    return {
        "state": row["input"],
        "questions": {"q": {"type": q["type"], "instructions": q["instructions"], "criteria": q["criteria"]}},
    }


def predicted(answer: dict[str, Any], kind: str) -> str | int:
    """The most probable option name (choice) or level index (score) of one wire answer."""
    probs = answer["probabilities"]
    best = max(probs, key=lambda k: probs[k])
    return int(best) if kind == "score" else best


def paired_interval(a: np.ndarray, b: np.ndarray, resamples: int = 1000, seed: int = 0) -> list[float]:
    """95% bootstrap interval of mean(a - b) over items (a, b: 0/1 correct per item)."""
    rng = np.random.default_rng(seed)
    diffs = a.astype(float) - b.astype(float)
    boots = [diffs[rng.integers(0, len(diffs), len(diffs))].mean() for _ in range(resamples)]
    return [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model name or path (default: the default model)")
    ap.add_argument("--per-cell", type=int, default=15, help="items per set and question type")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from transformers import pipeline
    from transformers.decision import DecisionConfig

    from logitjudge.engine.core import Engine
    from logitjudge.judge import Judge

    engine = Engine.load(args.model, device="cpu", dtype="float32")
    judges = {"default": Judge(engine), "single": Judge(engine, default_rotations=1)}
    decide = pipeline(
        "decision", model=engine.lm.model, tokenizer=engine.lm.tokenizer, decision_config=DecisionConfig()
    )
    rows = items(args.per_cell, args.seed)
    seconds = dict.fromkeys(CONTENDERS, 0.0)
    tokens = dict.fromkeys(CONTENDERS, 0)
    results = []
    for n, row in enumerate(rows, 1):
        kind, gold = row["question"]["type"], row["gold"]["answer"]
        got: dict[str, Any] = {}
        t = time.perf_counter()
        got["pipeline"] = decide(json.loads(json.dumps(body(row))))["q"]
        seconds["pipeline"] += time.perf_counter() - t
        tokens["pipeline"] += sum(int(i["input_ids"].shape[-1]) for i, _ in decide.preprocess(body(row))["prompts"])
        for name, judge in judges.items():
            engine.state_cache.clear()
            t = time.perf_counter()
            response = judge.ask({"model": judge.model_name, **body(row)})
            seconds[name] += time.perf_counter() - t
            tokens[name] += response["usage"]["input_tokens"]
            got[name] = response["answers"]["q"]
        pred = {c: predicted(got[c], kind) for c in CONTENDERS}
        results.append({"id": row["id"], "set": row["set"], "type": kind, "gold": gold, "predicted": pred})
        print(
            f"{n}/{len(rows)} {row['id']}: gold {gold!r} " + " ".join(f"{c} {pred[c]!r}" for c in CONTENDERS),
            flush=True,
        )
    figures: dict[str, Any] = {}
    for kind in TYPES:
        for where in (*SETS, "pooled"):
            cell = [r for r in results if r["type"] == kind and where in (r["set"], "pooled")]
            if not cell:
                continue
            right = {c: np.array([r["predicted"][c] == r["gold"] for r in cell]) for c in CONTENDERS}
            entry: dict[str, Any] = {"n": len(cell), "accuracy": {c: float(right[c].mean()) for c in CONTENDERS}}
            if kind == "score":
                entry["mae"] = {
                    c: float(np.mean([abs(r["predicted"][c] - r["gold"]) for r in cell])) for c in CONTENDERS
                }
            entry["difference_vs_pipeline"] = {
                c: {
                    "value": float(right[c].mean() - right["pipeline"].mean()),
                    "interval95": paired_interval(right[c], right["pipeline"]),
                }
                for c in ("default", "single")
            }
            figures[f"{kind} {where}"] = entry
    name = Path(engine.name).name.lower()
    record = {
        "command": " ".join(["python", *sys.argv]),
        "model": engine.name,
        "config": {"per_cell": args.per_cell, "seed": args.seed, "sets": SETS},
        "seconds": {c: round(v, 1) for c, v in seconds.items()},
        "input_tokens": tokens,
        "figures": figures,
        "rows": results,
        "metadata": run_metadata(device="cpu"),
    }
    out = RESULTS / f"decision-pipeline-accuracy-{name}.json"
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    md = [
        f'# Choice and score accuracy: logitjudge vs `pipeline("decision")`, {engine.name}',
        "",
        f"`{record['command']}`; {record['metadata']['date']}, commit {record['metadata']['git_sha']}, "
        f"transformers {record['metadata']['transformers']}, CPU fp32. Same weights, same items; the difference is "
        "logitjudge's accuracy minus the pipeline's on the same items [95% paired bootstrap interval].",
        "",
        "| question type, set | n | pipeline | logitjudge default | difference | logitjudge single order | difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, e in figures.items():
        a, d = e["accuracy"], e["difference_vs_pipeline"]
        cells = [
            f"{d[c]['value']:+.2f} [{d[c]['interval95'][0]:+.2f}, {d[c]['interval95'][1]:+.2f}]"
            for c in ("default", "single")
        ]
        mae = e.get("mae")
        acc = {c: f"{a[c]:.2f}" + (f" (MAE {mae[c]:.2f})" if mae else "") for c in CONTENDERS}
        md.append(
            f"| {key} | {e['n']} | {acc['pipeline']} | {acc['default']} | {cells[0]} | {acc['single']} | {cells[1]} |"
        )
    md += [
        "",
        "Seconds in all (tokens through the model): "
        + ", ".join(f"{c} {seconds[c]:.0f} s ({tokens[c]})" for c in CONTENDERS)
        + ". Sequential on a shared machine: read the seconds as rough.",
    ]
    out.with_suffix(".md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))


if __name__ == "__main__":
    main()
