"""Branch adapters: what serving them costs, and what training one costs, on the default model.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed/adapters.py --threads 2 --repeats 3 --train-rows 48

1. **Serving.** One request, a ~2k-token state and 16 questions (noul, choice of 4, score of 4 in
   turn), with no adapter and with 8 of its questions answered by adapters (two adapters, rank 16 on
   the top 8 layers' attention and MLP projections, random non-zero weights: the same arithmetic as
   trained ones), run in turn (plain, adapted, plain, ...) after one warm-up each, state cache off.
   The ratio of the medians is what adapters cost; the plain questions' answers are checked equal.
2. **Training.** ``train_adapter`` on ``--train-rows`` chunk_support rows of
   ``shared/data/train/vitaminc_support`` (seeded sample, no held-out report) for two epochs:
   seconds per row in the first epoch (states run, their KV and what enters the lowest adapted layer
   cached on disk) and the second (only the adapted layers run), the cache's size on disk and the
   process's peak memory. ``--parts training`` reruns this part alone (the other keeps its record).
   Before it, the states' forward alone, side by side on the same rows (full, then continuing the
   KV of the start all states share, in turn): what running that start once saves in epoch 1.

Writes ``benchmarks/results/adapters-<model>.{json,md}`` with the run's commit, date and machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _results import run_metadata, write_result  # noqa: E402

from logitjudge.engine.adapters import BranchAdapter  # noqa: E402
from logitjudge.engine.core import Engine  # noqa: E402
from logitjudge.engine.types import EngineRequest, Option, Question  # noqa: E402
from logitjudge.fit.adapter_steps import lora_parameters  # noqa: E402
from logitjudge.fit.adapters import AdapterTrainingConfig, train_adapter  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"


def questions(n: int) -> list[Question]:
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append(Question("noul", f"Does passage part {i} mention a date?", (Option("true"), Option("false"))))
        elif i % 3 == 1:
            out.append(Question("choice", f"Which topic fits part {i} best?", tuple(Option(x) for x in "ABCD")))
        else:
            out.append(
                Question("score", f"How formal is part {i}?", tuple(Option(str(k), f"level {k}") for k in range(4)))
            )
    return out


def state_of(engine: Engine, tokens: int) -> str:
    words = "The committee met on Tuesday to review the budget, the schedule and the staffing plan. ".split()
    text, k = [], 0
    while len(engine.lm.tokenizer(" ".join(text))["input_ids"]) < tokens:
        text += words[k % len(words) : k % len(words) + 8] + [str(k)]
        k += 8
    return " ".join(text)


def random_adapter(engine: Engine, name: str, seed: int) -> BranchAdapter:
    config = AdapterTrainingConfig(rank=16, alpha=32, layers=8)
    params = lora_parameters(engine.lm.model, config, seed)
    gen = torch.Generator().manual_seed(seed)
    weights = {p: (a.detach(), torch.randn(b.shape, generator=gen) * 0.01) for p, (a, b) in params.items()}
    return BranchAdapter(name, weights, config.alpha / config.rank, (0,))


def serving(engine: Engine, state_tokens: int, repeats: int) -> dict:
    state = state_of(engine, state_tokens)
    qs = questions(16)
    adapted = [replace(q, adapter=("a1" if i % 4 == 0 else "a2")) if i % 2 == 0 else q for i, q in enumerate(qs)]
    engine.set_adapters([random_adapter(engine, "a1", 1), random_adapter(engine, "a2", 2)])
    plain_req, adapted_req = EngineRequest(state, tuple(qs)), EngineRequest(state, tuple(adapted))
    times: dict[str, list[float]] = {"plain": [], "adapted": []}
    answers = {}
    for r in range(repeats + 1):
        for name, req in (("plain", plain_req), ("adapted", adapted_req)):
            t0 = time.perf_counter()
            res = engine.run_batch([req])[0]
            dt = time.perf_counter() - t0
            if r:  # the first round warms up
                times[name].append(dt)
            answers[name] = res
    same = max(
        abs(a - b)
        for i in range(1, 16, 2)
        for a, b in zip(answers["plain"].answers[i].probabilities, answers["adapted"].answers[i].probabilities)
    )
    moved = max(
        abs(a - b)
        for i in range(0, 16, 2)
        for a, b in zip(answers["plain"].answers[i].probabilities, answers["adapted"].answers[i].probabilities)
    )
    engine.set_adapters([])
    plan = engine.plan(plain_req)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "state_tokens": len(plan.prefix),
        "request_tokens": plan.n_tokens,
        "questions": 16,
        "adapted": 8,
        "seconds": times,
        "median_s": med,
        "ratio_adapted_over_plain": med["adapted"] / med["plain"],
        "plain_questions_max_abs_diff": same,
        "adapted_questions_max_abs_move": moved,
        "strategy": engine.strategy,
        "paths": dict(engine.path_counts),
    }


def training(engine: Engine, rows_n: int, seed: int) -> dict:
    from logitjudge.fit.examples import head_examples
    from logitjudge.rubrics.dataio import read_rows
    from logitjudge.rubrics.registry import default_registry

    rows = list(read_rows(SHARED / "data/train/vitaminc_support/train.jsonl"))
    random.Random(seed).shuffle(rows)
    defn = default_registry().get("chunk_support@4")
    examples = head_examples(defn, rows[:rows_n])
    config = AdapterTrainingConfig(rank=16, alpha=32, layers=8, epochs=2, batch_size=16, holdout=0.0, seed=seed)
    states = state_forwards(engine, examples[:16])
    with tempfile.TemporaryDirectory() as work:
        result = train_adapter(engine, examples, config, evaluator=f"{defn.name}@{defn.version}", work=work)
    t = result.trained
    return {
        "rows": t["rows"],
        "examples_source": "shared/data/train/vitaminc_support (seeded sample)",
        "seconds_per_epoch": t["seconds_per_epoch"],
        "seconds_per_row": t["seconds_per_row"],
        "second_over_first": t["seconds_per_epoch"][1] / t["seconds_per_epoch"][0],
        "kv_cache_bytes": t["kv_cache_bytes"],
        "kv_cache_bytes_per_row": t["kv_cache_bytes"] / max(1, t["rows"]),
        "peak_rss_mb": t["peak_rss_mb"],
        "config": {"rank": 16, "alpha": 32, "layers": 8, "branches_per_step": 16},
        "projected_hours_3000_rows_epoch_1": t["seconds_per_row"][0] * 3000 / 3600,
        "state_forward": states,
    }


def state_forwards(engine: Engine, examples: list) -> dict:
    """Seconds of each example's state forward, full and continuing the shared start's KV, in turn
    (full first on even rows, continued first on odd ones), on fresh disk caches."""
    from logitjudge.fit.adapter_steps import KVStore, branch_rows, shared_start, state_kv

    rows = branch_rows(engine, examples)
    start = shared_start(engine, rows)
    assert start is not None
    took: dict[str, list[float]] = {"full": [], "continued": []}
    with tempfile.TemporaryDirectory() as work:
        stores = {k: KVStore(Path(work) / k, ("bench",)) for k in took}
        for i, r in enumerate(rows):
            for kind in ("full", "continued") if i % 2 == 0 else ("continued", "full"):
                t0 = time.perf_counter()
                state_kv(engine, r.prefix, stores[kind], start if kind == "continued" else None)
                took[kind].append(time.perf_counter() - t0)
    full, cont = sum(took["full"]), sum(took["continued"])
    return {
        "rows": len(rows),
        "shared_start_tokens": len(start.ids),
        "mean_state_tokens": statistics.mean(len(r.prefix) for r in rows),
        "seconds_per_row": {"full": full / len(rows), "continued": cont / len(rows)},
        "ratio_continued_over_full": cont / full,
    }


def state_lines(f: dict | None) -> list[str]:
    if f is None:
        return []
    return [
        f"States' forward alone ({f['rows']} rows, {f['mean_state_tokens']:.0f} tokens on average, "
        f"{f['shared_start_tokens']} of them the start they share), in turn on the same rows: "
        f"{f['seconds_per_row']['full']:.2f} s per row in full, {f['seconds_per_row']['continued']:.2f} s "
        f"continuing the shared start's KV (ratio {f['ratio_continued_over_full']:.2f}); training does the latter.",
        "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--state-tokens", type=int, default=2000)
    ap.add_argument("--train-rows", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results"))
    ap.add_argument(
        "--parts",
        default="serving,training",
        help="which parts to run; a part left out keeps its record (and that record's metadata) from the last result",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    engine = Engine.load(args.model, state_cache_mb=0)
    stem = f"adapters-{engine.name}"
    meta = run_metadata(str(engine.lm.device))
    previous = Path(args.out) / f"{stem}.json"
    record = json.loads(previous.read_text()) if previous.exists() else {}
    record["engine"] = engine.describe()
    parts = args.parts.split(",")
    if "serving" in parts:
        record["serving"] = {**serving(engine, args.state_tokens, args.repeats), "meta": meta}
        print(json.dumps(record["serving"], indent=2), flush=True)
    if "training" in parts:
        record["training"] = {**training(engine, args.train_rows, args.seed), "meta": meta}
        print(json.dumps(record["training"], indent=2), flush=True)
    record.pop("meta", None)
    record["metadata"] = meta
    s, t = record["serving"], record["training"]
    md = "\n".join(
        [
            f"# Branch adapters: serving and training cost ({engine.name}, {engine.precision}, {args.threads} threads)",
            "",
            f"Serving: commit {s['meta'].get('git_sha')}, {s['meta'].get('date')}, {s['meta'].get('device_name')}. "
            f"Training: commit {t['meta'].get('git_sha')}, {t['meta'].get('date')}, {t['meta'].get('device_name')}.",
            "",
            "| serving: one request | median s | ratio |",
            "|---|---|---|",
            f"| {s['state_tokens']}-token state x 16 questions, no adapter | {s['median_s']['plain']:.2f} | 1.00 |",
            f"| the same, 8 questions through 2 adapters (r 16, top 8 layers) | {s['median_s']['adapted']:.2f} | "
            f"{s['ratio_adapted_over_plain']:.2f} |",
            "",
            f"Plain questions' answers with and without the adapted siblings: max |dp| "
            f"{s['plain_questions_max_abs_diff']:.1e}; the adapted ones moved by up to {s['adapted_questions_max_abs_move']:.3f}.",
            "",
            "| training (chunk_support rows) | epoch 1 | epoch 2 |",
            "|---|---|---|",
            f"| seconds ({t['rows']} rows, 16 branches per step) | {t['seconds_per_epoch'][0]:.0f} | "
            f"{t['seconds_per_epoch'][1]:.0f} |",
            f"| seconds per row | {t['seconds_per_row'][0]:.2f} | {t['seconds_per_row'][1]:.2f} |",
            "",
            f"Second epoch / first: {t['second_over_first']:.2f}. Cache on disk (states' KV, branches' frozen layers) "
            f"{t['kv_cache_bytes'] / 2**20:.1f} MiB ({t['kv_cache_bytes_per_row'] / 1024:.0f} KiB per row); peak memory "
            f"{t['peak_rss_mb']} MiB. At epoch 1's rate, 3,000 rows take {t['projected_hours_3000_rows_epoch_1']:.2f} h.",
            "",
            *state_lines(t.get("state_forward")),
        ]
    )
    print(write_result(Path(args.out), stem, record, md))


if __name__ == "__main__":
    main()
