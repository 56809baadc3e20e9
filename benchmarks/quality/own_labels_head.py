"""A head on your own labels: faithfulness fitted on part of HaluEval QA, measured on the rest.

::

    python benchmarks/quality/own_labels_head.py [--rows ../shared/data/halueval_qa/dev.jsonl]
        [--holdout 0.33] [--model ...] [--dtype auto]

What ``logitjudge fit ROWS --evaluator faithfulness --label-key faithful --holdout 0.33`` does (the
same library calls: ``head_examples``, ``extract``, ``fit_head``, the CLI's default layers and
folds), then three readouts of the held-out rows side by side, all on the same rows (the
question groups the fit never saw; a question's right and hallucinated answers stay together):

- ``head``: the fitted head's P(faithful);
- ``zero-shot``: the label readout of the very same question (what the evaluator's question
  says through its Yes/No tokens, uncalibrated);
- ``length``: the answer's length alone, shorter = faithful (HaluEval QA's artefact: the shorter
  answer is the faithful one in almost every pair; see docs/guides/pitfalls.md).

AUROC and accuracy with 95% cluster-bootstrap intervals over the questions. Writes
``benchmarks/results/own-labels-faithfulness-<set>-<model>.json`` and ``.md`` (``<set>``: the
rows' folder). The guide's example is QAGS (``--rows ../shared/data/qags/dev.jsonl``), where
length does not give the label away; HaluEval QA (the default) shows what a length artefact does.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parents[1]))
from _results import DATA, RESULTS, run_metadata, write_result  # noqa: E402

from logitjudge.fit import classification_report, default_layers, extract, fit_head, head_examples  # noqa: E402
from logitjudge.judge import Judge  # noqa: E402
from logitjudge.rubrics.dataio import read_rows  # noqa: E402
from logitjudge.rubrics.registry import default_registry  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=Path, default=DATA / "halueval_qa" / "dev.jsonl")
    ap.add_argument("--holdout", type=float, default=0.33)
    ap.add_argument("--model", default=None)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=None, help="feature cache folder (default: none)")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    rows = read_rows(args.rows)
    defn = default_registry().get("faithfulness")
    examples = head_examples(defn, rows, label_key="faithful")
    judge = Judge.load(args.model, dtype=args.dtype, heads="none", calibration="none")
    engine = judge.engine
    layers = default_layers(engine.runner.n_layers)
    features = extract(engine, examples, layers=layers, cache=args.cache)
    t_feat = time.monotonic() - t0
    result = fit_head(defn, examples, features, engine.describe(), holdout=args.holdout, seed=args.seed)
    test = list(result.held_out_index)
    by_id = {str(r["id"]): r for r in rows}
    held = [examples[i] for i in test]
    gold = [ex.label for ex in held]
    groups = [ex.group for ex in held]
    options = list(result.head.options)  # ("true", "false")
    # shorter answer = faithful: P(true) falls with the answer's length (a rank is all AUROC reads)
    lengths = np.array([len(str(by_id[ex.key]["output"])) for ex in held], dtype=float)
    p_short = 1.0 - (lengths - lengths.min()) / max(1.0, float(lengths.max() - lengths.min()))
    readouts = {
        "head": result.held_out,
        "zero-shot label readout": result.held_out["zero_shot"],
        "answer length (shorter = faithful)": classification_report(
            gold, np.stack([p_short, 1 - p_short], 1), options, groups, seed=args.seed
        ),
    }
    record = {
        "command": "python benchmarks/quality/own_labels_head.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": judge.model_name,
        "engine": engine.describe(),
        "rows": str(args.rows),
        "examples": len(examples),
        "held_out_rows": len(test),
        "held_out_questions": len(set(groups)),
        "layer_choice": result.layer_choice,
        "c": result.c,
        "readouts": {
            k: {m: v[m] for m in ("rows", "auroc", "auroc_interval", "accuracy", "accuracy_interval")}
            for k, v in readouts.items()
        },
        "seconds": {"features": round(t_feat, 1), "total": round(time.monotonic() - t0, 1)},
        "metadata": run_metadata(device=str(engine.describe().get("device", "cpu"))),
    }
    slug = judge.model_name.split("/")[-1].lower()
    md = write_result(args.out_dir, f"own-labels-faithfulness-{args.rows.parent.name}-{slug}", record, markdown(record))
    print(markdown(record))
    print(f"wrote {md.with_suffix('.json')} and {md}")
    return 0


def markdown(record: dict) -> str:
    meta = record["metadata"]

    def ci(interval: list[float] | None) -> str:
        return f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""

    lines = [
        f"# A faithfulness head on your own labels: {record['model']}",
        "",
        f"`{record['command']}`; {meta.get('date')}, commit {meta.get('git_sha')}"
        f"{' (uncommitted changes)' if meta.get('git_dirty') else ''}, {meta.get('device_name')}, "
        f"precision {record['engine'].get('precision', record['engine'].get('dtype'))}.",
        "",
        f"Fitted on {record['examples'] - record['held_out_rows']} rows of `{record['rows']}`; measured on the other "
        f"{record['held_out_rows']} rows ({record['held_out_questions']} questions, never seen by the fit). "
        f"Layer choice {record['layer_choice']}, C = {record['c']}. Features {record['seconds']['features']} s, "
        f"total {record['seconds']['total']} s.",
        "",
        "| readout | AUROC [95% CI] | accuracy [95% CI] |",
        "|---|---|---|",
    ]
    for name, r in record["readouts"].items():
        lines.append(
            f"| {name} | {r['auroc']:.3f}{ci(r['auroc_interval'])} | {r['accuracy']:.3f}{ci(r['accuracy_interval'])} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
