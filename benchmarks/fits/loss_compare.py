"""Two adapter runs on the same training batches, compared by their training loss, step window by window.

    python benchmarks/fits/loss_compare.py --work RUN/.adapter --command "logitjudge fit ..." \
        --reference results/adapter-chunk-support-4921-1of4-qwen2.5-coder-1.5b-instruct.json \
        --tag all-layers-1of4 [--summary notes.md]

A run of ``logitjudge fit --adapter`` with the same rows, seed, part and schedule as a committed
run (``--reference``: a result file of ``adapter_report.py``) trains on the same batches in the same
order, so its loss per 10 steps is paired with the reference's: a difference that holds window
after window is the change under test (say, which layers are adapted), not the rows. Reads the
run's checkpoint (``checkpoint.pt`` in ``--work``: every step's loss and the seconds trained; a run
stopped with Ctrl-C or SIGTERM keeps it), so a run too long for one sitting still gives its curve.
The training loss says how fast each run fits its rows, not how well it does on held-out rows: that
is the finished run's report. Writes ``benchmarks/results/adapter-loss-<tag>.{json,md}`` with the
run's metadata.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
sys.path.insert(0, str(Path(__file__).resolve().parent))  # adapter_report's loss curve
from _results import RESULTS, run_metadata, write_result  # noqa: E402
from adapter_report import loss_curve  # noqa: E402

WINDOW = 10


def compare(losses: list[float], reference: list[float]) -> list[dict[str, Any]]:
    """Per ``WINDOW`` steps: the run's mean loss, the reference's, their difference (nats), for the
    windows the run has completed (``reference``: the reference's per-window means)."""
    run = loss_curve(losses, max(1, len(losses)), WINDOW)[f"per_{WINDOW}_steps"][: len(losses) // WINDOW]
    return [
        {"steps": [i * WINDOW, (i + 1) * WINDOW - 1], "run": r, "reference": ref, "difference": r - ref}
        for i, (r, ref) in enumerate(zip(run, reference))
    ]


def markdown(record: dict[str, Any], summary: str) -> str:
    meta = record["metadata"]
    lines = [
        f"# Training loss on the same batches: {record['tag']}",
        "",
        f"`{record['command']}`",
        "",
        f"Against `{record['reference']}` (`{record['reference_command']}`).",
        "",
        f"{meta['date']}, commit {meta.get('git_sha', '?')}, torch {meta.get('torch')}, {meta.get('device_name')}.",
        f"The run: {record['steps']} steps of {record['batch_size']} rows in {record['seconds']:.0f} s "
        f"({record['seconds_per_row']:.2f} s per row; a last step may be short).",
        "",
        summary.strip(),
        "",
        "| steps | this run | reference | difference |",
        "|---|---|---|---|",
    ]
    for w in record["windows"]:
        lines.append(
            f"| {w['steps'][0]}-{w['steps'][1]} | {w['run']:.3f} | {w['reference']:.3f} | {w['difference']:+.3f} |"
        )
    lines += [
        "",
        f"Mean difference over {len(record['windows'])} windows: {record['mean_difference']:+.3f} nats; "
        f"lower in {record['windows_lower']} of {len(record['windows'])}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="the run's --work folder (its checkpoint.pt)")
    ap.add_argument("--command", required=True, help="the fit command of the run")
    ap.add_argument("--reference", type=Path, required=True, help="a committed adapter_report.py result file")
    ap.add_argument("--tag", required=True)
    ap.add_argument("--summary", type=Path, default=None)
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    import torch

    state = torch.load(args.work / "checkpoint.pt", weights_only=False)["state"]
    ref = json.loads(args.reference.read_text(encoding="utf-8"))
    losses = [float(x) for x in state["losses"]]
    windows = compare(losses, ref["loss"][f"per_{WINDOW}_steps"])
    batch = ref["binding"]["trained"]["batch_size"]
    seconds = float(sum(state["seconds"]))
    record = {
        "tag": args.tag,
        "command": args.command,
        "reference": args.reference.name,
        "reference_command": ref["command"],
        "steps": len(losses),
        "batch_size": batch,
        "seconds": seconds,
        "seconds_per_row": seconds / max(1, len(losses) * batch),
        "losses": losses,
        "windows": windows,
        "mean_difference": float(np.mean([w["difference"] for w in windows])) if windows else None,
        "windows_lower": sum(w["difference"] < 0 for w in windows),
        "metadata": run_metadata(device="cpu"),
    }
    summary = args.summary.read_text(encoding="utf-8") if args.summary else ""
    print(write_result(args.out_dir, f"adapter-loss-{args.tag}", record, markdown(record, summary)).read_text("utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
