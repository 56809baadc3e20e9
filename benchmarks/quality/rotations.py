"""Rotations: accuracy, ECE and token cost of option-order rotations, on the same items.

    python benchmarks/quality/rotations.py benchmarks/results/quality-qwen2.5-coder-1.5b-instruct-sys1bench_canary.json \\
        benchmarks/results/quality-qwen2.5-coder-1.5b-instruct-rot6.json [more runs ...]

The first file is the K=1 run; every other file is a ``benchmarks/quality/quality.py --rotations K`` run.
For each later run, the K=1 rows of the *same item ids* are taken from the first file, and both
are measured with :func:`quality.group_metrics` (so the figures are defined as in the quality
table). Only groups whose questions rotate are shown (choice and score questions; yes/no
questions never rotate). Writes ``benchmarks/results/rotations-<model>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # quality.py beside it
from quality import RESULTS, _fmt, group_metrics  # noqa: E402

ROTATING = ("typed_question:choice", "typed_question:score", "chunk_support", "answer_correctness")


def compare(base: dict[str, Any], run: dict[str, Any]) -> list[dict[str, Any]]:
    k = run["config"]["rotations"]
    out = []
    for set_name, rows in run["items"].items():
        ids = {r["id"] for r in rows}
        base_rows = [r for r in base["items"].get(set_name, []) if r["id"] in ids]
        if len(base_rows) != len(rows):
            print(
                f"{set_name}: {len(rows) - len(base_rows)} items of the K={k} run are not in the K=1 run; skipped",
                file=sys.stderr,
            )
            continue
        before = {m["group"]: m for m in group_metrics(set_name, base_rows)}
        for m in group_metrics(set_name, rows):
            if m["group"] not in ROTATING or m["group"] not in before:
                continue
            b = before[m["group"]]
            out.append(
                {
                    "set": set_name,
                    "group": m["group"],
                    "n": m["n"],
                    "rotations": k,
                    "accuracy_k1": b["accuracy"],
                    "accuracy_k": m["accuracy"],
                    "ece_k1": b["ece"],
                    "ece_k": m["ece"],
                    "brier_k1": b["brier"],
                    "brier_k": m["brier"],
                    "tokens_k1": b["tokens_per_item"],
                    "tokens_k": m["tokens_per_item"],
                    "items_per_s_k1": base["sets"][set_name]["items_per_s"],
                    "items_per_s_k": run["sets"][set_name]["items_per_s"],
                }
            )
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        description="Accuracy, ECE and token cost of option-order rotations, on the same items."
    )
    ap.add_argument("base", type=Path, help="the K=1 run (a benchmarks/quality/quality.py JSON)")
    ap.add_argument("runs", type=Path, nargs="+", help="runs of the same items at --rotations K")
    args = ap.parse_args(argv)
    base = json.loads(args.base.read_text())
    rows = [r for path in args.runs for r in compare(base, json.loads(path.read_text()))]
    model = base["environment"]["engine"]["model"]
    lines = [
        "| set | group | n | K | acc K=1 | acc K | ECE K=1 | ECE K | Brier K=1 | Brier K | tokens/item K=1 | tokens/item K |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['group']} | {r['n']} | {r['rotations']} | {_fmt(r['accuracy_k1'])} | "
            f"{_fmt(r['accuracy_k'])} | {_fmt(r['ece_k1'])} | {_fmt(r['ece_k'])} | {_fmt(r['brier_k1'])} | "
            f"{_fmt(r['brier_k'])} | {r['tokens_k1']:.0f} | {r['tokens_k']:.0f} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    (RESULTS / f"rotations-{model}.md").write_text(table)
    (RESULTS / f"rotations-{model}.json").write_text(
        json.dumps({"command": "python benchmarks/quality/rotations.py " + " ".join(argv), "rows": rows}, indent=1)
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
