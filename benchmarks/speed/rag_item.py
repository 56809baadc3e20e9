"""What the shipped branch adapter costs on a RAG item: every RAG evaluator over a ~2k-token context.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed/rag_item.py --threads 2 --repeats 3

One item, ``logitjudge evaluate --evaluators RAG`` (chunk_relevance, chunk_support, faithfulness,
answer_relevancy, context_recall, context_relevancy, context_entity_recall; every evaluator's
questions over the item in one request), its context eight chunks cut from QAGS news articles
(read-only from ``shared/data``; about 2k tokens in all) and its output and reference a summary.
The same judge answers it with the shipped adapters installed (chunk_support@4 answered by the
adapter: what ``--adapters shipped`` serves) and without them (``--adapters none``: the shipped
head reads chunk_support@4, as before the adapter shipped), in turn, with
the state cache off (a warm-up on a short item first). The ratio of the medians is what the adapter costs an item. The other
evaluators' scores are compared between the two runs (they must be equal: the adapter runs only
on chunk_support's branches).

Writes ``benchmarks/results/rag-item-<model>.{json,md}`` with the run's commit, date and machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _results import run_metadata, write_result  # noqa: E402

from logitjudge import Judge  # noqa: E402
from logitjudge.rubrics.api import evaluate  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QAGS = ROOT.parent / "shared" / "data" / "qags" / "dev.jsonl"


def rag_item(judge: Judge, tokens: int, chunks: int) -> dict:
    """An item whose ``context`` is ``chunks`` pieces of real news text, ``tokens`` tokens in all."""
    tok = judge.engine.lm.tokenizer
    rows = [json.loads(line) for line in QAGS.read_text(encoding="utf-8").splitlines()] if QAGS.exists() else []
    text = "\n".join(c for r in rows for c in (r.get("context") or [])) or "The committee met on Tuesday. " * 600
    ids = tok(text, add_special_tokens=False)["input_ids"][:tokens]
    step = len(ids) // chunks
    context = [tok.decode(ids[k * step : (k + 1) * step]).strip() for k in range(chunks)]
    summary = next((r["output"] for r in rows if r.get("output")), "The committee reviewed the budget.")
    return {
        "input": "What happened, according to the articles?",
        "output": summary,
        "expected": summary,
        "context": context,
    }


def scores(run) -> dict[str, float | None]:
    return {name: r.score for name, r in run.results[0].results.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="default: LOGITJUDGE_MODEL, else the default model")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=2048, help="context tokens")
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    judge = Judge.load(args.model, dtype=args.dtype, state_cache_mb=0)
    engine = judge.engine
    shipped = list(engine.adapters.values())
    if not shipped:
        ap.error(f"no shipped adapter is bound to {judge.model_name}: nothing to compare")
    item = rag_item(judge, args.tokens, args.chunks)
    for name in ("adapter", "none"):  # warm-up: the same evaluators on a short item, each way
        engine.set_adapters(shipped if name == "adapter" else None)
        evaluate(judge, [rag_item(judge, 256, args.chunks)], ["RAG"])
    times: dict[str, list[float]] = {"adapter": [], "none": []}
    results: dict[str, dict[str, float | None]] = {}
    for _ in range(args.repeats):
        for name in ("adapter", "none"):
            engine.set_adapters(shipped if name == "adapter" else None)
            t0 = time.perf_counter()
            run = evaluate(judge, [item], ["RAG"])
            times[name].append(time.perf_counter() - t0)
            results[name] = scores(run)
            print(f"{name}: {times[name][-1]:.1f} s", flush=True)
    engine.set_adapters(shipped)
    med = {k: statistics.median(v) for k, v in times.items()}
    others = sorted(k for k in results["adapter"] if k != "chunk_support")
    changed = {
        k: (results["adapter"][k], results["none"][k]) for k in others if results["adapter"][k] != results["none"][k]
    }
    tok = engine.lm.tokenizer
    record = {
        "engine": judge.describe(),
        "adapters": [a.name for a in shipped],
        "item": {
            "chunks": len(item["context"]),
            "context_tokens": sum(len(tok(c, add_special_tokens=False)["input_ids"]) for c in item["context"]),
            "evaluators": sorted(results["adapter"]),
        },
        "seconds": times,
        "median_s": med,
        "ratio_adapter_over_none": med["adapter"] / med["none"],
        "scores": results,
        "other_evaluators_changed": changed,
        "threads": args.threads,
        "metadata": run_metadata(device=str(judge.describe().get("device", "cpu"))),
    }
    m = record["metadata"]
    md = "\n".join(
        [
            f"# The shipped adapter on a RAG item ({judge.model_name}, precision {judge.describe().get('precision')}, "
            f"{args.threads} threads)",
            "",
            f"`python benchmarks/speed/rag_item.py {' '.join(argv if argv is not None else sys.argv[1:])}`; "
            f"{m['date']}, commit {m.get('git_sha', '?')}, {m.get('device_name')}.",
            "",
            f"One item: {record['item']['chunks']} chunks, {record['item']['context_tokens']} context tokens, "
            f"evaluators {', '.join(record['item']['evaluators'])}; state cache off; "
            f"median of {args.repeats} runs each, in turn, after a warm-up on a short item.",
            "",
            "| the item with | median s | ratio |",
            "|---|---|---|",
            f"| `--adapters none` (the shipped head reads chunk_support@4) | {med['none']:.2f} | 1.00 |",
            f"| `--adapters shipped` ({', '.join(record['adapters'])}) | {med['adapter']:.2f} | "
            f"{record['ratio_adapter_over_none']:.2f} |",
            "",
            "Other evaluators' scores with and without the adapter: "
            + ("equal." if not changed else f"changed: {changed}."),
            f" chunk_support: {results['adapter'].get('chunk_support')} with the adapter, "
            f"{results['none'].get('chunk_support')} with the head.",
            "",
        ]
    )
    stem = f"rag-item-{judge.model_name.split('/')[-1].lower()}"
    print(md)
    print(write_result(Path(args.out), stem, record, md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
