"""Quality: agreement with real labels and calibration, on every labelled dev set.

    python benchmarks/quality.py [--model PATH] [--limit 24] [--rotations 1] [--calibration calib.json]
                                 [--sets vitaminc,qags] [--tag NAME]

Each ``dev.jsonl`` in ``shared/data`` (read-only; see its SOURCE.md) runs through
:func:`logitjudge.rubrics.api.evaluate` with ``evaluators="auto"`` (each row's own evaluator;
typed-question rows run ``typed_question``). ``--limit N`` takes N rows per set, stratified:
round-robin over the gold label (and question type), so both labels appear; WikiEval takes whole
pairs, round-robin over its three evaluators. Metrics per set and evaluator (typed sets: per
question type):

- ``acc``: pairwise accuracy for WikiEval pairs (RAGAS protocol; ties 1/2), chunk accuracy for
  chunk_support, accuracy at the pass threshold for binary labels, exact accuracy for typed
  questions -- all from :func:`logitjudge.rubrics.aggregate.summarize`;
- ``AUROC`` of P(pass) against a binary label (aggregate);
- ``Brier`` and ``ECE`` (10 bins) of the distributions against gold
  (:mod:`logitjudge.rubrics.samples`; rubric scores judged against a binary label: Brier and
  ECE of the 0..1 score, as aggregate's ECE);
- ``len``: the length baseline beside it ("the shorter text passes": AUROC, or pairwise
  accuracy for pairs; aggregate);
- ``ref``: published reference points (RAGAS paper, WikiEval: faithfulness 0.95, answer
  relevance 0.78, context relevance 0.70);
- ``items/s`` and input tokens per item.

Writes ``benchmarks/results/quality-<model>[-<tag>].json`` (config, environment, metrics,
per-item result rows) and ``.md`` (the table), and prints the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sklearn.metrics import brier_score_loss

from logitjudge.rubrics.aggregate import gold_of, summarize
from logitjudge.rubrics.api import evaluate
from logitjudge.rubrics.cli import _text_len, res_field
from logitjudge.rubrics.samples import sample_metrics, samples_from_rows

RESULTS = Path(__file__).parent / "results"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

REFERENCES: dict[tuple[str, str], tuple[float, str]] = {
    ("wikieval", "faithfulness"): (0.95, "RAGAS paper (gpt-3.5), WikiEval pairwise"),
    ("wikieval", "answer_relevancy"): (0.78, "RAGAS paper (gpt-3.5), WikiEval pairwise"),
    ("wikieval", "chunk_relevance"): (0.70, "RAGAS paper (gpt-3.5), WikiEval pairwise (context relevance)"),
}
"""Published figures to show beside ours: (set, evaluator) -> (value, source)."""


# -- selecting rows ----------------------------------------------------------------------------


def _stratum(row: Mapping[str, Any]) -> tuple[Any, ...]:
    gold = row.get("gold") or {}
    qtype = (row.get("question") or {}).get("type")
    for key in ("faithful", "correct", "recall", "label"):
        if key in gold:
            return (row.get("evaluator"), qtype, str(gold[key]))
    return (row.get("evaluator"), qtype, str(gold.get("answer")))


def _round_robin(groups: Iterable[list[Any]], limit: int) -> list[Any]:
    queues = [list(g) for g in groups]
    out: list[Any] = []
    while len(out) < limit and any(queues):
        for q in queues:
            if q and len(out) < limit:
                out.append(q.pop(0))
    return out


def select_rows(rows: Sequence[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """``limit`` rows, stratified (see the module docstring), in the file's order; all when None."""
    if limit is None or limit >= len(rows):
        return list(rows)
    if any("pair" in (r.get("gold") or {}) for r in rows):
        pairs: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            pairs[str(r.get("evaluator"))][str(r["gold"].get("pair", r["id"]))].append(r)
        chosen = _round_robin((list(p.values()) for p in pairs.values()), max(1, limit // 2))
        keep = {id(r) for pair in chosen for r in pair}
    else:
        strata: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            strata[_stratum(r)].append(r)
        keep = {id(r) for r in _round_robin(strata.values(), limit)}
    return [r for r in rows if id(r) in keep]


# -- metrics -----------------------------------------------------------------------------------


def _group_key(record: Mapping[str, Any], name: str) -> str:
    res = record["results"][name]
    if name == "typed_question" and res.get("answer"):
        return f"{name}:{res['answer']['type']}"
    return name


def _accuracy(summary: Any, key: str) -> tuple[float | None, str]:
    if key.startswith("typed_question:"):
        return summary.value(f"accuracy_{key.split(':')[1]}"), "exact"
    for metric, kind in (
        ("pairwise_accuracy", "pairwise"),
        ("chunk_accuracy", "3-way"),
        ("accuracy", "at threshold"),
    ):
        if summary.value(metric) is not None:
            return summary.value(metric), kind
    return None, ""


def group_metrics(set_name: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One metrics row per evaluator (typed questions: per question type) of one set."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        for name in rec.get("results", {}):
            groups[_group_key(rec, name)].append({**rec, "results": {name: rec["results"][name]}})
    out = []
    for key, rows in groups.items():
        name = key.split(":")[0]
        summary = summarize(rows)[name]
        acc, acc_kind = _accuracy(summary, key)
        samples = samples_from_rows(rows)
        cal: dict[str, Any] = {}
        by_count = {len(s.probs) for s in samples}
        if len(by_count) == 1 or (by_count and 2 not in by_count):
            cal = sample_metrics(samples)
        elif summary.value("ece") is not None:  # a rubric score against a binary label
            scored = [
                (r["results"][name]["score"], r["gold"]["passed"][name])
                for r in rows
                if r["results"][name].get("score") is not None
                and name in (r.get("gold") or {}).get("passed", {})
            ]
            cal = {
                "n": len(scored),
                "ece": summary.value("ece"),
                "brier": float(brier_score_loss([g for _, g in scored], [s for s, _ in scored])),
            }
        length = summary.value("length_baseline_pairwise_accuracy")
        if length is None:
            length = summary.value("length_baseline_auroc")
        ref = REFERENCES.get((set_name, name))
        tokens = sum(r.get("usage", {}).get("input_tokens", 0) for r in rows)
        out.append(
            {
                "set": set_name,
                "group": key,
                "n": summary.n,
                "accuracy": acc,
                "accuracy_kind": acc_kind,
                "auroc": summary.value("auroc"),
                "brier": cal.get("brier"),
                "ece": cal.get("ece"),
                "nll": cal.get("nll"),
                "calibration_n": cal.get("n"),
                "length_baseline": length,
                "reference": ref[0] if ref else None,
                "reference_source": ref[1] if ref else None,
                "tokens_per_item": round(tokens / max(1, len(rows)), 1),
                "summary": summary.model_dump(mode="json"),
            }
        )
    return out


# -- running -----------------------------------------------------------------------------------


def run_set(judge: Any, path: Path, limit: int | None, batch_size: int) -> tuple[list[dict[str, Any]], float]:
    """Evaluate one set; returns the result rows (as ``logitjudge evaluate`` writes them) and seconds."""
    rows = select_rows([json.loads(line) for line in path.read_text().splitlines() if line.strip()], limit)
    t0 = time.perf_counter()
    run = evaluate(judge, rows, "auto", batch_size=batch_size)
    elapsed = time.perf_counter() - t0
    records = []
    for raw, res in zip(rows, run.results, strict=True):
        rec = res.model_dump(mode="json", exclude_none=True)
        rec["id"] = raw["id"]
        rec["evaluator"] = raw.get("evaluator")
        rec["gold"] = gold_of(raw).model_dump(mode="json")
        rec["x_lengths"] = {
            k: n for k in ("output", "context") if (n := _text_len(res_field(raw, k))) is not None
        }
        records.append(rec)
    return records, elapsed


def _fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def markdown_table(record: Mapping[str, Any]) -> str:
    cfg = record["config"]
    head = (
        f"Model `{record['environment']['engine']['model']}` ({record['environment']['engine']['dtype']}, "
        f"{record['environment']['engine']['device']}), rotations {cfg['rotations']}, "
        f"calibration {cfg['calibration'] or 'none'}; "
        + (
            f"**--limit {cfg['limit']} rows per set** (stratified by gold label; WikiEval: whole pairs), "
            "so every figure has a wide error bar (see `stderr` in the JSON)."
            if cfg["limit"]
            else "all rows."
        )
    )
    lines = [
        head,
        "",
        "| set | evaluator | n | acc | (kind) | AUROC | Brier | ECE | length baseline | published | items/s | tokens/item |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in record["metrics"]:
        speed = record["sets"][m["set"]]["items_per_s"]
        lines.append(
            f"| {m['set']} | {m['group']} | {m['n']} | {_fmt(m['accuracy'])} | {m['accuracy_kind']} | "
            f"{_fmt(m['auroc'])} | {_fmt(m['brier'])} | {_fmt(m['ece'])} | {_fmt(m['length_baseline'])} | "
            f"{_fmt(m['reference'], 2)} | {_fmt(speed, 2)} | {m['tokens_per_item']:.0f} |"
        )
    lines += [
        "",
        "acc: pairwise = share of pairs where the preferred item scores higher (RAGAS protocol); "
        "3-way = chunk label accuracy; at threshold = passed vs gold at the evaluator's threshold; "
        "exact = typed answer equals gold. Length baseline: the same figure for 'the shorter text "
        "passes / is preferred' (AUROC for binary sets, pairwise accuracy for pairs). Brier/ECE: "
        "see logitjudge/rubrics/samples.py (binary: of P(yes); more options: multi-class Brier, "
        "top-label ECE; rubric scores against binary gold: of the 0..1 score).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model dir, .gguf, alias, or cached id (default: embedded)")
    ap.add_argument("--limit", type=int, default=None, help="rows per set (stratified); default all")
    ap.add_argument(
        "--rotations", type=int, default=1, help="option-order rotations for choice/score (1 = off)"
    )
    ap.add_argument("--calibration", default=None, help="apply this calibration file")
    ap.add_argument("--sets", default=None, help="comma-separated set names (default: every set)")
    ap.add_argument("--tag", default=None, help="suffix of the output file names")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--data", default=str(DATA), help="folder of <set>/dev.jsonl")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--rebuild", default=None, metavar="JSON",
                    help="recompute metrics and the table of an earlier run from its stored items (no model)")
    args = ap.parse_args(argv)
    if args.rebuild:
        path = Path(args.rebuild)
        record = json.loads(path.read_text())
        record["metrics"] = [m for name, rows in record["items"].items() for m in group_metrics(name, rows)]
        path.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
        path.with_suffix(".md").write_text(markdown_table(record))
        print(markdown_table(record))
        return 0

    from logitjudge.judge import Judge

    judge = Judge.load(args.model, default_rotations=args.rotations, calibration=args.calibration)
    engine = judge.describe()
    wanted = set(args.sets.split(",")) if args.sets else None
    paths = sorted(
        p for p in Path(args.data).glob("*/dev.jsonl") if wanted is None or p.parent.name in wanted
    )
    stem = f"quality-{engine['model']}" + (f"-{args.tag}" if args.tag else "")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "command": " ".join(["python", "benchmarks/quality.py", *(sys.argv[1:] if argv is None else argv)]),
        "config": {
            "model": args.model,
            "limit": args.limit,
            "rotations": args.rotations,
            "calibration": args.calibration,
            "batch_size": args.batch_size,
            "sets": [p.parent.name for p in paths],
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "engine": json.loads(json.dumps(engine, default=str)),
            **{
                m: getattr(sys.modules[m], "__version__", "?")
                for m in ("torch", "transformers", "sklearn")
                if m in sys.modules
            },
        },
        "sets": {},
        "metrics": [],
        "items": {},
    }
    for path in paths:
        name = path.parent.name
        records, elapsed = run_set(judge, path, args.limit, args.batch_size)
        record["sets"][name] = {
            "n_items": len(records),
            "elapsed_s": round(elapsed, 2),
            "items_per_s": round(len(records) / elapsed, 4) if elapsed > 0 else None,
            "input_tokens": sum(r.get("usage", {}).get("input_tokens", 0) for r in records),
        }
        record["metrics"] += group_metrics(name, records)
        record["items"][name] = records
        print(f"{name}: {len(records)} items in {elapsed:.0f} s", file=sys.stderr, flush=True)
        (out_dir / f"{stem}.json").write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
        (out_dir / f"{stem}.md").write_text(markdown_table(record))
    print(markdown_table(record))
    print(f"wrote {out_dir / (stem + '.json')} and .md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
