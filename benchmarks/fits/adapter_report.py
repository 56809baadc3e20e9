"""A result file from a `logitjudge fit --adapter` run: its binding's held-out report, its loss per epoch.

    python benchmarks/fits/adapter_report.py --adapter OUT/chunk_support --work OUT/.adapter \
        --command "logitjudge fit ... --adapter ..." --tag chunk-support-480 [--summary notes.md]

Reads the adapter folder's binding (``logitjudge_adapter.json``: the settings, seconds per epoch,
cache size, peak memory, and the held-out report beside the zero-shot readout, the training
majority class and the shipped head on the same rows) and the run's checkpoint (``checkpoint.pt``
in ``--work``: the loss of every step). Writes ``benchmarks/results/adapter-<tag>-<model>.{json,md}``
with the run's metadata; ``--summary`` (a Markdown file) is put above the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
from _results import RESULTS, run_metadata, write_result  # noqa: E402

from logitjudge.fit.adapter_steps import layers_note  # noqa: E402
from logitjudge.fit.adapters import epochs_note, start_note, train_only_note  # noqa: E402


def loss_curve(losses: list[float], steps_per_epoch: int, window: int = 10) -> dict[str, Any]:
    """Mean step loss per epoch and per ``window`` steps (the readout's cross-entropy, nats)."""
    per_epoch = [
        float(np.mean(losses[k : k + steps_per_epoch])) for k in range(0, len(losses), max(1, steps_per_epoch))
    ]
    per_window = [float(np.mean(losses[k : k + window])) for k in range(0, len(losses), window)]
    return {"per_epoch": per_epoch, f"per_{window}_steps": per_window, "steps": len(losses)}


def _fig(r: dict[str, Any] | None) -> str:
    if not r:
        return "n/a"
    lo, hi = r.get("accuracy_interval") or (None, None)
    ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None else ""
    auroc = f", AUROC {r['auroc']:.3f}" if r.get("auroc") is not None else ""  # two options
    return f"{r['accuracy']:.3f}{ci}, macro-F1 {r['macro_f1']:.3f}, log loss {r['log_loss']:.3f}{auroc}"


def markdown(record: dict[str, Any], summary: str) -> str:
    m, t = record["binding"]["metrics"], record["binding"]["trained"]
    meta = record["metadata"]
    lines = [
        f"# A {record['binding']['evaluator']} adapter: {t['rows']} rows, {t['epochs']} epochs ({record['binding']['model']})",
        "",
        f"`{record['command']}`",
        "",
        f"{meta['date']}, commit {meta.get('git_sha', '?')}, torch {meta.get('torch')}, {meta.get('device_name')}, "
        f"precision {record['binding']['precision']}, {t['threads']} threads.",
        "",
        summary.strip(),
        "",
        f"## Held-out rows (n = {m['rows']}; 95% bootstrap intervals by group)",
        "",
        "| reader | accuracy, macro-F1, log loss (AUROC with two options) |",
        "|---|---|",
        f"| the adapter | {_fig(m)} |",
        f"| zero-shot label readout | {_fig(m.get('zero_shot'))} |",
        *([f"| the shipped head `{m['head'].get('name', '-')}` | {_fig(m['head'])} |"] if m.get("head") else []),
        f"| training majority class | {_fig(m.get('majority'))} |",
    ]
    for src, r in (m.get("per_source") or {}).items():
        head = f"; head {_fig(r['head'])}" if r.get("head") else ""
        lines.append(f"| adapter on {src} (n={r['rows']}) | {_fig(r)}{head} |")
    curve = record["loss"]
    n = len(record["binding"].get("options") or ()) or 3  # the question's options
    lines += [
        "",
        "## Training",
        "",
        f"- rank {t['rank']}, alpha {t['alpha']}, {layers_note(t['layers'])}, lr {t['lr']} "
        f"(warm-up {t.get('warmup', 0)}, linear decay), {t['batch_size']} branches per step, seed {t['seed']}",
        f"- rows {t['rows']}{train_only_note(t.get('train_only'))}; epochs {t['epochs']}"
        f"{epochs_note(t.get('epochs_from_step'))}",
        *([f"- {started}"] if (started := start_note(t)) else []),
        f"- seconds per row per epoch: {t['seconds_per_row']}; state KV cache on disk "
        f"{t['kv_cache_bytes'] / 2**20:.0f} MiB; peak memory {t['peak_rss_mb']} MiB",
        f"- mean training loss per epoch (nats; ln {n} = {math.log(n):.3f} is a uniform guess): "
        + ", ".join(f"{x:.3f}" for x in curve["per_epoch"]),
        "- per 10 steps: " + ", ".join(f"{x:.2f}" for x in curve["per_10_steps"]),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adapter", type=Path, required=True, help="the folder fit --adapter wrote")
    ap.add_argument("--work", type=Path, required=True, help="the run's --work folder (its checkpoint.pt)")
    ap.add_argument("--command", required=True, help="the fit command that made it")
    ap.add_argument("--tag", required=True)
    ap.add_argument("--summary", type=Path, default=None)
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    import torch

    binding = json.loads((args.adapter / "logitjudge_adapter.json").read_text(encoding="utf-8"))
    saved = torch.load(args.work / "checkpoint.pt", weights_only=False)
    t = binding["trained"]
    steps = -(-t["rows"] // t["batch_size"])
    record = {
        "command": args.command,
        "binding": binding,
        "loss": loss_curve([float(x) for x in saved["state"]["losses"]], steps),
        "metadata": run_metadata(device="cpu"),
    }
    summary = args.summary.read_text(encoding="utf-8") if args.summary else ""
    stem = f"adapter-{args.tag}-{binding['model']}"
    print(write_result(args.out_dir, stem, record, markdown(record, summary)).read_text("utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
