"""Quality of the four RAG evaluators on per-chunk labels: every version side by side, one run.

    python benchmarks/quality/rag_quality.py [--model qwen2.5-coder-1.5b] [--limit N] [--seed 0]
        [--sets hotpotqa_relevance,noveleval,anli,vitaminc,hotpotqa_entity_recall_derived,wikieval]
        [--versions 1,2] [--tag NAME] [--rebuild benchmarks/results/rag-quality-....json]

What it answers: does each evaluator judge, on real labelled data, better than the trivial
baseline of its set? Per set (the labelled dev rows in ``../shared/data/<set>/dev.jsonl``):

| set | evaluator | metrics | baseline |
|---|---|---|---|
| hotpotqa_relevance | chunk_relevance | per-chunk AUROC, accuracy at the evaluator's threshold, share called relevant | shorter chunk is relevant (AUROC) |
| noveleval | chunk_relevance | nDCG@10 (graded 0/1/2), AUROC of grade 2 vs 0 | retrieval order (nDCG@10 of the given order) |
| anli, vitaminc | chunk_support | 3-way accuracy, macro-F1, share "supports" (gold share beside it), confusion | majority class |
| hotpotqa_entity_recall_derived | context_entity_recall | level exact accuracy and MAE of the level the score states (score x 3), quadratic weighted kappa | longer context = higher level (Spearman) |
| wikieval (answer_relevancy pairs) | answer_relevancy | pairwise accuracy (ties 1/2) | longer answer wins |

Every figure has its n and a 95% percentile-bootstrap interval over source items (a HotpotQA
question, a NovelEval query, a WikiEval pair, a row). Token cost: the engine's input tokens per
item. Each version runs as ``<evaluator>@<version>`` on the same rows in the same process.
Writes ``benchmarks/results/rag-quality-<model>[-tag].{json,md}`` with the run's metadata.
Metrics come from scikit-learn (``roc_auc_score``, ``f1_score``, ``cohen_kappa_score``,
``ndcg_score``, ``confusion_matrix``) and scipy (``spearmanr``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import cohen_kappa_score, confusion_matrix, f1_score, ndcg_score, roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
from _results import DATA, RESULTS, run_metadata  # noqa: E402

SETS = {
    "hotpotqa_relevance": "chunk_relevance",
    "noveleval": "chunk_relevance",
    "anli": "chunk_support",
    "vitaminc": "chunk_support",
    "hotpotqa_entity_recall_derived": "context_entity_recall",
    "wikieval": "answer_relevancy",
}
ITEM_FIELDS = ("id", "input", "output", "expected", "context")
SUPPORT = ("supports", "contradicts", "unrelated")


def load_rows(
    name: str, limit: int | None, seed: int, data: Path = DATA, exclude: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """The set's rows of its evaluator, less ``exclude`` (row ids); with ``limit``, a seeded
    sample of whole source items."""
    rows = [json.loads(line) for line in (data / name / "dev.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["evaluator"] == SETS[name] and r["id"] not in exclude]
    if limit is None:
        return rows
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(source_of(name, r), []).append(r)
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    out: list[dict[str, Any]] = []
    for k in keys:
        if len(out) >= limit:
            break
        out += groups[k]
    return out


def source_of(name: str, row: Mapping[str, Any]) -> str:
    """The source item a row belongs to (the bootstrap's unit)."""
    if name == "wikieval":
        return str(row["gold"]["pair"])
    if name == "hotpotqa_entity_recall_derived":
        return str(row["meta"]["hotpot_id"])
    return str(row["id"])


def run_version(judge: Any, rows: Sequence[Mapping[str, Any]], evaluator: str, batch_size: int) -> list[dict[str, Any]]:
    """Evaluate ``rows`` with ``evaluator`` (``name@version``); one record per row."""
    items = [{k: r[k] for k in ITEM_FIELDS if r.get(k) is not None} for r in rows]
    start = time.perf_counter()
    run = judge.evaluate(items, [evaluator], batch_size=batch_size)
    seconds = time.perf_counter() - start
    out = []
    for r, res in zip(rows, run.results, strict=True):
        (result,) = res.results.values()
        out.append(
            {
                "id": r["id"],
                "result": result.model_dump(mode="json", exclude_none=True),
                "tokens": res.usage.input_tokens,
                "seconds": seconds / len(rows),
            }
        )
    return out


def bootstrap(
    units: Sequence[Any], stat: Callable[[Sequence[Any]], float | None], resamples: int, seed: int
) -> list[float] | None:
    """95% percentile interval of ``stat`` over resampled units (None when it cannot be computed)."""
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(resamples):
        sample = [units[i] for i in rng.integers(0, len(units), len(units))]
        try:
            v = stat(sample)
        except ValueError:  # e.g. one class only in the resample
            continue
        if v is not None and np.isfinite(v):
            vals.append(v)
    if len(vals) < resamples // 2:
        return None
    return [float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))]


def figure(
    units: Sequence[Any], stat: Callable[[Sequence[Any]], float | None], resamples: int, seed: int
) -> dict[str, Any]:
    """``{"value", "ci", "n"}`` of ``stat`` over ``units`` (source items)."""
    return {"value": stat(units), "ci": bootstrap(units, stat, resamples, seed), "n": len(units)}


def _chunk_rows(
    rows: Sequence[Mapping[str, Any]], recs: Sequence[Mapping[str, Any]]
) -> list[list[tuple[Any, float, bool, int]]]:
    """Per source item: (gold, P(relevant), passed, chunk chars) per chunk (errors/skips dropped)."""
    units = []
    for r, rec in zip(rows, recs, strict=True):
        res = rec["result"]
        if res.get("status") != "ok":
            continue
        gold = r["gold"].get("per_chunk", r["gold"].get("per_chunk_grade"))
        units.append(
            [
                (g, d.get("probability", d["score"]), d["passed"], len(str(c)))
                for g, d, c in zip(gold, res["details"], r["context"], strict=True)
            ]
        )
    return units


def _flat(units: Sequence[Sequence[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    return [c for u in units for c in u]


def relevance_figures(
    rows: Sequence[Mapping[str, Any]], recs: Sequence[Mapping[str, Any]], resamples: int, seed: int
) -> dict[str, Any]:
    units = _chunk_rows(rows, recs)

    def auroc(us: Sequence[Any], key: int = 1, sign: float = 1.0) -> float:
        flat = _flat(us)
        return float(roc_auc_score([bool(c[0]) for c in flat], [sign * c[key] for c in flat]))

    return {
        "per_chunk_auroc": figure(units, auroc, resamples, seed),
        "accuracy_at_threshold": figure(
            units, lambda us: float(np.mean([c[2] == bool(c[0]) for c in _flat(us)])), resamples, seed
        ),
        "share_called_relevant": figure(units, lambda us: float(np.mean([c[2] for c in _flat(us)])), resamples, seed),
        "gold_share_relevant": figure(
            units, lambda us: float(np.mean([bool(c[0]) for c in _flat(us)])), resamples, seed
        ),
        "baseline_shorter_auroc": figure(units, lambda us: auroc(us, 3, -1.0), resamples, seed),
    }


def ndcg_figures(
    rows: Sequence[Mapping[str, Any]], recs: Sequence[Mapping[str, Any]], resamples: int, seed: int
) -> dict[str, Any]:
    units = _chunk_rows(rows, recs)

    def ndcg(us: Sequence[Any], order: bool = False) -> float:
        vals = []
        for u in us:
            grades = [[c[0] for c in u]]
            scores = [[-i for i in range(len(u))]] if order else [[c[1] for c in u]]
            vals.append(ndcg_score(grades, scores, k=10))
        return float(np.mean(vals))

    def auroc(us: Sequence[Any]) -> float:
        flat = [c for c in _flat(us) if c[0] in (0, 2)]
        return float(roc_auc_score([c[0] == 2 for c in flat], [c[1] for c in flat]))

    return {
        "ndcg_at_10": figure(units, ndcg, resamples, seed),
        "auroc_grade2_vs_0": figure(units, auroc, resamples, seed),
        "share_called_relevant": figure(units, lambda us: float(np.mean([c[2] for c in _flat(us)])), resamples, seed),
        "baseline_order_ndcg_at_10": figure(units, lambda us: ndcg(us, True), resamples, seed),
    }


def support_figures(
    rows: Sequence[Mapping[str, Any]], recs: Sequence[Mapping[str, Any]], resamples: int, seed: int
) -> dict[str, Any]:
    units = []
    for r, rec in zip(rows, recs, strict=True):
        if rec["result"].get("status") == "ok":
            units += [(g, d["label"]) for g, d in zip(r["gold"]["per_chunk"], rec["result"]["details"], strict=True)]
    gold = [u[0] for u in units]
    majority = max(SUPPORT, key=gold.count)
    return {
        "accuracy_3way": figure(units, lambda us: float(np.mean([g == p for g, p in us])), resamples, seed),
        "macro_f1": figure(
            units,
            lambda us: float(
                f1_score([g for g, _ in us], [p for _, p in us], labels=list(SUPPORT), average="macro", zero_division=0)
            ),
            resamples,
            seed,
        ),
        "share_supports": figure(units, lambda us: float(np.mean([p == "supports" for _, p in us])), resamples, seed),
        "gold_share_supports": figure(
            units, lambda us: float(np.mean([g == "supports" for g, _ in us])), resamples, seed
        ),
        "baseline_majority_accuracy": figure(
            units, lambda us: float(np.mean([g == majority for g, _ in us])), resamples, seed
        ),
        "confusion": {
            "labels": list(SUPPORT),
            "rows_gold_cols_pred": confusion_matrix(gold, [u[1] for u in units], labels=list(SUPPORT)).tolist(),
        },
    }


def entity_figures(
    rows: Sequence[Mapping[str, Any]], recs: Sequence[Mapping[str, Any]], resamples: int, seed: int
) -> dict[str, Any]:
    by_source: dict[str, list[tuple[Any, ...]]] = {}
    for r, rec in zip(rows, recs, strict=True):
        res = rec["result"]
        if res.get("status") != "ok":
            continue
        probs = res["probabilities"]
        level = int(round(res["score"] * 3))  # the level the score states (v2: its verdicts; v1: E[level] rounded)
        mode = int(max(probs, key=lambda k: probs[k]))
        expected = sum(int(k) * p for k, p in probs.items())
        chars = sum(len(str(c)) for c in r["context"])
        by_source.setdefault(source_of("hotpotqa_entity_recall_derived", r), []).append(
            (r["gold"]["level"], level, expected, chars, mode, res["score"] * 3)
        )
    units = list(by_source.values())

    def flat(us: Sequence[Any]) -> list[tuple[Any, ...]]:
        return [x for u in us for x in u]

    def kappa(us: Sequence[Any]) -> float | None:
        gold = [x[0] for x in flat(us)]
        if len(set(gold)) < 2:  # one gold level: agreement beyond chance is undefined
            return None
        return float(cohen_kappa_score(gold, [x[1] for x in flat(us)], labels=[0, 1, 2, 3], weights="quadratic"))

    return {
        "level_exact_accuracy": figure(
            units, lambda us: float(np.mean([x[0] == x[1] for x in flat(us)])), resamples, seed
        ),
        "mae_level": figure(units, lambda us: float(np.mean([abs(x[0] - x[5]) for x in flat(us)])), resamples, seed),
        "level_exact_accuracy_most_probable_level": figure(
            units, lambda us: float(np.mean([x[0] == x[4] for x in flat(us)])), resamples, seed
        ),
        "quadratic_weighted_kappa": figure(units, kappa, resamples, seed),
        "spearman_expected_level": figure(
            units, lambda us: float(spearmanr([x[0] for x in flat(us)], [x[2] for x in flat(us)])[0]), resamples, seed
        ),
        "baseline_length_spearman": figure(
            units, lambda us: float(spearmanr([x[0] for x in flat(us)], [x[3] for x in flat(us)])[0]), resamples, seed
        ),
    }


def pair_figures(
    rows: Sequence[Mapping[str, Any]], recs: Sequence[Mapping[str, Any]], resamples: int, seed: int
) -> dict[str, Any]:
    pairs: dict[str, dict[bool, tuple[float, int]]] = {}
    for r, rec in zip(rows, recs, strict=True):
        if rec["result"].get("status") == "ok":
            pairs.setdefault(r["gold"]["pair"], {})[bool(r["gold"]["preferred_in_pair"])] = (
                rec["result"]["score"],
                len(r["output"] or ""),
            )
    units = [(p[True], p[False]) for p in pairs.values() if len(p) == 2]

    def win(a: float, b: float) -> float:
        return 1.0 if a > b else 0.5 if a == b else 0.0

    return {
        "pairwise_accuracy": figure(
            units, lambda us: float(np.mean([win(a[0], b[0]) for a, b in us])), resamples, seed
        ),
        "baseline_longer_wins": figure(
            units, lambda us: float(np.mean([win(a[1], b[1]) for a, b in us])), resamples, seed
        ),
    }


FIGURES = {
    "hotpotqa_relevance": relevance_figures,
    "noveleval": ndcg_figures,
    "anli": support_figures,
    "vitaminc": support_figures,
    "hotpotqa_entity_recall_derived": entity_figures,
    "wikieval": pair_figures,
}


def figures_of(record: Mapping[str, Any], resamples: int, seed: int, data: Path = DATA) -> dict[str, Any]:
    """Every set's figures per version, from the stored per-row results."""
    out: dict[str, Any] = {}
    for name, block in record["sets"].items():
        by_id = {r["id"]: r for r in load_rows(name, None, 0, data)}
        out[name] = {}
        for version, recs in block["versions"].items():
            rows = [by_id[rec["id"]] for rec in recs]
            figs = FIGURES[name](rows, recs, resamples, seed)
            figs["tokens_per_item"] = float(np.mean([rec["tokens"] for rec in recs])) if recs else None
            figs["seconds_per_item"] = float(np.mean([rec["seconds"] for rec in recs])) if recs else None
            figs["not_ok"] = sum(rec["result"].get("status") != "ok" for rec in recs)
            figs["in_sample_for_fitted_versions"] = int(bool(block.get("in_sample")))
            out[name][version] = figs
    return out


def _cell(fig: Any) -> str:
    if not isinstance(fig, dict) or fig.get("value") is None:
        return "n/a"
    ci = fig.get("ci")
    return f"{fig['value']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def markdown(record: Mapping[str, Any]) -> str:
    meta = record["metadata"]
    lines = [
        f"# RAG evaluators on per-chunk labels: {record['model']}",
        "",
        f"`{record['command']}`; {meta.get('date')}, commit {meta.get('git_sha', '?')}"
        f"{' (uncommitted changes)' if meta.get('git_dirty') else ''}, logitjudge {meta.get('logitjudge')}, "
        f"torch {meta.get('torch')}, transformers {meta.get('transformers')}, {meta.get('device')} ({meta.get('device_name')}), "
        f"precision {record.get('engine', {}).get('precision', record.get('engine', {}).get('dtype', '?'))}.",
        "Each cell: value [95% bootstrap interval over source items]; n = source items.",
        "",
        "| set | metric | " + " | ".join(f"v{v}" for v in record["versions"]) + " |",
        "|---|---|" + "---|" * len(record["versions"]),
    ]
    for name, by_version in record["figures"].items():
        first = next(iter(by_version.values()))
        for metric, fig in first.items():
            if metric == "confusion":
                continue
            if isinstance(fig, dict):
                n = fig.get("n")
                cells = [_cell(by_version[v].get(metric)) for v in by_version]
                lines.append(f"| {name} (n={n}) | {metric} | " + " | ".join(cells) + " |")
            else:
                cells = [
                    f"{by_version[v].get(metric):.0f}" if by_version[v].get(metric) is not None else "n/a"
                    for v in by_version
                ]
                lines.append(f"| {name} | {metric} | " + " | ".join(cells) + " |")
        for v, figs in by_version.items():
            if "confusion" in figs:
                c = figs["confusion"]
                lines.append(
                    f"| {name} | confusion v{v} (rows gold, cols predicted: {'/'.join(c['labels'])}) | `{c['rows_gold_cols_pred']}` |"
                    + " |" * (len(by_version) - 1)
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default=None, help="model name or path (default: the main model)")
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated sets")
    ap.add_argument("--versions", default="1,2", help="evaluator versions to compare (each as name@version)")
    ap.add_argument(
        "--limit", type=int, default=None, help="rows per set, whole source items (seeded sample; default all)"
    )
    ap.add_argument(
        "--set-limits", default="", help="per-set overrides of --limit, e.g. hotpotqa_relevance=10,noveleval=6"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument(
        "--dtype", default="auto", help="the engine's --dtype: auto, mixed, float32, bfloat16 (the header names it)"
    )
    ap.add_argument("--tag", default="")
    ap.add_argument(
        "--adapters",
        default="shipped",
        help="branch adapters: shipped (default: those shipped for the model), none, or folders (comma-separated); "
        "an adapter bound to a version answers its questions",
    )
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    ap.add_argument(
        "--rebuild", type=Path, default=None, help="recompute figures and tables of an earlier run (no model)"
    )
    ap.add_argument(
        "--exclude",
        type=Path,
        default=None,
        help="a JSON file {ids: {set: [row ids]}} of rows to leave out (benchmarks/results/rag-fit-rows.json: the "
        "rows the shipped coefficients were fitted on); a set whose rows are all excluded runs on them, marked in-sample",
    )
    args = ap.parse_args(argv)

    if args.rebuild:
        record = json.loads(args.rebuild.read_text(encoding="utf-8"))
        record["figures"] = figures_of(record, args.resamples, args.seed, args.data)
        args.rebuild.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        args.rebuild.with_suffix(".md").write_text(markdown(record), encoding="utf-8")
        print(markdown(record))
        return 0

    from logitjudge import Judge
    from logitjudge.rubrics.registry import default_registry

    registry = default_registry()

    judge = Judge.load(
        args.model,
        calibration="shipped",
        dtype=args.dtype,
        adapters=args.adapters,
    )
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    record: dict[str, Any] = {
        "command": "python benchmarks/quality/rag_quality.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": judge.model_name,
        "engine": judge.describe(),
        "versions": versions,
        "config": {"limit": args.limit, "seed": args.seed, "resamples": args.resamples},
        "sets": {},
    }
    record["metadata"] = run_metadata(device=str(judge.describe().get("device", "cpu")))
    slug = judge.model_name.split("/")[-1].lower() + (f"-{args.tag}" if args.tag else "")
    out = args.out_dir / f"rag-quality-{slug}.json"
    excluded = json.loads(args.exclude.read_text(encoding="utf-8"))["ids"] if args.exclude else {}
    limits = {k: int(v) for k, v in (kv.split("=") for kv in args.set_limits.split(",") if kv.strip())}
    record["config"]["set_limits"] = limits
    for name in [s.strip() for s in args.sets.split(",") if s.strip()]:
        limit = limits.get(name, args.limit)
        rows = load_rows(name, limit, args.seed, args.data, frozenset(excluded.get(name, ())))
        in_sample = not rows
        if in_sample:  # every dev row was a fitting row: measure on them, and say so
            rows = load_rows(name, limit, args.seed, args.data)
        record["sets"][name] = {
            "evaluator": SETS[name],
            "versions": {},
            "in_sample": in_sample,
            "excluded": len(excluded.get(name, ())),
        }
        for v in versions:
            if f"{SETS[name]}@{v}" not in registry.versions:  # e.g. a version never shipped
                print(f"{name}: {SETS[name]}@{v} does not exist; skipped", flush=True)
                continue
            recs = run_version(judge, rows, f"{SETS[name]}@{v}", args.batch_size)
            record["sets"][name]["versions"][v] = recs
            print(f"{name} v{v}: {len(recs)} rows, {np.mean([r['seconds'] for r in recs]):.1f} s/row", flush=True)
            out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")  # partial runs survive
    record["figures"] = figures_of(record, args.resamples, args.seed, args.data)
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(markdown(record), encoding="utf-8")
    print(markdown(record))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
