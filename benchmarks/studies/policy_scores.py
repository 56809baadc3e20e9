"""Score questions that state a policy: read the level directly, or ask the policy's conditions and compose.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/studies/policy_scores.py [--model qwen2.5-coder-1.5b] [--limit 50]

What it answers: sys1bench's ticket ``priority`` is a five-level score whose instructions state
an additive policy ("start from the urgency of the issue (informational 0, routine 1, blocked or
money at stake 2). Add 1 if the customer is angry. Add 1 if the customer tier is gold or
enterprise. Cap at 4."). A next-token readout reads one distribution over the five levels: can
it apply the policy, and if not, does the model know the policy's parts? Each dev ticket
(``../shared/data/sys1bench_canary``, the 50 ``priority`` rows) is one System One request, as
``logitjudge serve`` answers it (default rotations), holding:

- ``priority``: the set's own question, levels and policy as given;
- the policy's three conditions as questions of their own, written once from the policy's text
  (the same for every ticket): ``urgency`` (a score, levels 0-2 with the policy's wording),
  ``angry`` and ``high_tier`` (yes/no).

All four share the ticket's state in one forward pass. Contenders, each against the gold level:

- ``direct``: the most probable level of ``priority``;
- ``direct_expected``: its expected level, rounded;
- ``direct_batch``: the most probable level after batch calibration over the tickets
  (:func:`logitjudge.rubrics.debias.batch_calibrate`, label-free);
- ``composed``: the policy applied by the caller to the model's answers to its conditions
  (most probable urgency level + [P(angry) > 0.5] + [P(high tier) > 0.5], capped at 4);
- ``majority``: the most frequent gold level of these tickets, for every ticket.

Also the accuracy of each condition against the ticket's own labels where the set has them
(``is_angry``) or states them (the tier is written in the ticket). Accuracy with a 95% bootstrap
interval over tickets (:func:`logitjudge.rubrics.samples.bootstrap_interval`, 1,000 resamples,
seed 0) and the paired difference to the majority baseline. Writes
``benchmarks/results/policy-scores-<model>.{json,md}``; ``--rebuild PATH`` recomputes the figures
and tables of such a file from its rows (no model).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
from _results import DATA, RESULTS, run_metadata  # noqa: E402

from logitjudge.rubrics.samples import bootstrap_interval  # noqa: E402

CONDITIONS: dict[str, dict[str, Any]] = {
    "urgency": {
        "type": "score",
        "instructions": "How urgent is the customer's issue itself?",
        "criteria": [
            "Informational: a question, no problem to fix.",
            "Routine: a request or problem that can wait.",
            "Blocked or money at stake: the customer cannot proceed, or is losing or owed money.",
        ],
    },
    "angry": {"type": "noul", "instructions": "Is the customer expressing anger or hostility?"},
    "high_tier": {"type": "noul", "instructions": "Is the customer tier gold or enterprise?"},
}
CONTENDERS = ("direct", "direct_expected", "direct_batch", "composed", "majority")


def tickets(limit: int | None, data: Path = DATA) -> list[dict[str, Any]]:
    """The set's ``priority`` rows, with the ticket's ``is_angry`` gold where the set has it."""
    rows = [json.loads(line) for line in (data / "sys1bench_canary" / "dev.jsonl").read_text().splitlines()]
    angry = {r["id"].rsplit(":", 1)[0]: r["gold"]["answer"] for r in rows if r["question"]["key"] == "is_angry"}
    out = []
    for r in rows:
        if r["question"]["key"] == "priority":
            out.append(dict(r, angry_gold=angry.get(r["id"].rsplit(":", 1)[0])))
    return out[:limit] if limit else out


def stated_tier(text: str) -> bool | None:
    """Whether the ticket states a gold or enterprise tier (``customer tier X``), None if unstated."""
    m = re.search(r"customer tier (\w+)", text)
    return None if m is None else m.group(1).lower() in ("gold", "enterprise")


def _interval(values: np.ndarray, ids: list[str]) -> list[float] | None:
    """95% bootstrap interval of the mean of ``values`` (one per ticket) over the tickets."""
    ci = bootstrap_interval(lambda idx: float(values[idx].mean()), ids)
    return None if ci is None else [float(ci["lo"]), float(ci["hi"])]


def figures_of(predicted: dict[str, np.ndarray], gold: np.ndarray, ids: list[str], levels: int) -> dict[str, Any]:
    """Per contender: accuracy, its interval, MAE, the paired difference to ``majority`` and the
    levels it predicted (``predicted``: (N,) levels per contender; ``gold``: (N,))."""
    base = (predicted["majority"] == gold).astype(float)
    out: dict[str, Any] = {}
    for c in CONTENDERS:
        right = (predicted[c] == gold).astype(float)
        out[c] = {
            "accuracy": float(right.mean()),
            "interval95": _interval(right, ids),
            "mae": float(np.abs(predicted[c] - gold).mean()),
            "difference_vs_majority": float(right.mean() - base.mean()),
            "difference_interval95": _interval(right - base, ids),
            "predicted_levels": np.bincount(predicted[c], minlength=levels).tolist(),
        }
    return out


def write(record: dict[str, Any], out: Path) -> None:
    """The record as ``out`` (JSON) and its table beside it (``.md``); prints the table."""
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    levels, tokens, seconds = len(record["gold_levels"]), record["input_tokens"], record["seconds"]
    meta = record["metadata"]
    md = [
        f"# A stated policy: sys1bench ticket priority, {record['model']}",
        "",
        f"`{record['command']}`; {meta['date']}, commit {meta['git_sha']}, CPU fp32. "
        f"{record['n']} tickets (gold levels 0-{levels - 1}: {record['gold_levels']}); accuracy [95% bootstrap], "
        "difference to the majority level on the same tickets [95% paired].",
        "",
        "| contender | accuracy | MAE | difference to majority | levels predicted |",
        "|---|---|---|---|---|",
    ]
    for c in CONTENDERS:
        f = record["figures"][c]
        lo, hi = f["interval95"]
        dlo, dhi = f["difference_interval95"]
        md.append(
            f"| {c} | {f['accuracy']:.2f} [{lo:.2f}, {hi:.2f}] | {f['mae']:.2f} | "
            f"{f['difference_vs_majority']:+.2f} [{dlo:+.2f}, {dhi:+.2f}] | {f['predicted_levels']} |"
        )
    md += [
        "",
        "Conditions against the ticket's labels: "
        + ", ".join(f"{k} {v['accuracy']:.2f} (n {v['n']})" for k, v in record["conditions_accuracy"].items())
        + f". {tokens} tokens in {seconds:.0f} s for the four questions of every ticket.",
    ]
    out.with_suffix(".md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model name or path (default: the default model)")
    ap.add_argument("--limit", type=int, default=None, help="first N priority rows (default all 50)")
    ap.add_argument("--rebuild", type=Path, default=None, help="recompute the figures of this result file (no model)")
    args = ap.parse_args()
    if args.rebuild:
        record = json.loads(args.rebuild.read_text(encoding="utf-8"))
        rows = record["rows"]
        predicted = {c: np.array([r[c] for r in rows]) for c in CONTENDERS}
        gold = np.array([r["gold"] for r in rows])
        record["figures"] = figures_of(predicted, gold, [r["id"] for r in rows], len(record["gold_levels"]))
        write(record, args.rebuild)
        return
    from logitjudge.engine.core import Engine
    from logitjudge.judge import Judge
    from logitjudge.rubrics.debias import batch_calibrate

    engine = Engine.load(args.model, device="cpu", dtype="float32")
    judge = Judge(engine)
    rows = tickets(args.limit)
    answers, seconds, tokens = [], 0.0, 0
    for n, row in enumerate(rows, 1):
        q = row["question"]
        questions = {"priority": {"type": q["type"], "instructions": q["instructions"], "criteria": q["criteria"]}}
        questions.update(CONDITIONS)
        t = time.perf_counter()
        response = judge.ask({"model": judge.model_name, "state": row["input"], "questions": questions})
        seconds += time.perf_counter() - t
        tokens += response["usage"]["input_tokens"]
        answers.append(response["answers"])
        print(f"{n}/{len(rows)} {row['id']} gold {row['gold']['answer']}", flush=True)

    levels = len(rows[0]["question"]["criteria"])
    gold = np.array([r["gold"]["answer"] for r in rows])
    p = np.array([[a["priority"]["probabilities"][str(k)] for k in range(levels)] for a in answers])  # (N, 5)
    urgency = np.array([max(a["urgency"]["probabilities"], key=a["urgency"]["probabilities"].get) for a in answers])
    angry = np.array([a["angry"]["noul"] > 0.5 for a in answers])
    high = np.array([a["high_tier"]["noul"] > 0.5 for a in answers])
    majority = int(np.bincount(gold).argmax())
    predicted = {
        "direct": p.argmax(1),
        "direct_expected": np.rint(p @ np.arange(levels)).astype(int),
        "direct_batch": batch_calibrate(p).argmax(1),
        "composed": np.minimum(levels - 1, urgency.astype(int) + angry + high),
        "majority": np.full(len(rows), majority),
    }
    figures = figures_of(predicted, gold, [r["id"] for r in rows], levels)
    parts: dict[str, Any] = {}
    angry_gold = [(i, r["angry_gold"]) for i, r in enumerate(rows) if r["angry_gold"] is not None]
    parts["angry"] = {"n": len(angry_gold), "accuracy": float(np.mean([angry[i] == g for i, g in angry_gold]))}
    tier_gold = [(i, stated_tier(r["input"])) for i, r in enumerate(rows)]
    tier_gold = [(i, g) for i, g in tier_gold if g is not None]
    parts["high_tier"] = {"n": len(tier_gold), "accuracy": float(np.mean([high[i] == g for i, g in tier_gold]))}

    name = Path(engine.name).name.lower()
    record = {
        "command": " ".join(["python", *sys.argv]),
        "model": engine.name,
        "config": {"limit": args.limit, "conditions": CONDITIONS},
        "n": len(rows),
        "gold_levels": np.bincount(gold, minlength=levels).tolist(),
        "seconds": round(seconds, 1),
        "input_tokens": tokens,
        "figures": figures,
        "conditions_accuracy": parts,
        "rows": [
            {"id": r["id"], "gold": int(g), **{c: int(predicted[c][i]) for c in CONTENDERS}}
            for i, (r, g) in enumerate(zip(rows, gold))
        ],
        "metadata": run_metadata(device="cpu"),
    }
    write(record, RESULTS / f"policy-scores-{name}.json")


if __name__ == "__main__":
    main()
