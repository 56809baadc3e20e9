"""Which probability should faithfulness's per-claim verdict give on RAG answer sentences? Offline.

Reads an **uncalibrated** `logitjudge evaluate --evaluators faithfulness --calibration none` run
over labelled claim rows (one answer sentence per row, its retrieved passages as the context;
default: the training folder's ExpertQA rows) and the data file it ran on (for each row's
``meta.group``, one id per question, and ``meta.system``). Each claim's score is faithfulness v2's
contrast of P(yes) with and without the context under the shipped ``noul:2`` temperature, the
score before the evaluator's Platt scaling (as in ``threshold_transfer.py``). Reported, over every
row, at the product's 0.5 threshold:

- ``uncalibrated``: the score as it is;
- ``shipped``: under the shipped file's ``faithfulness@2`` Platt scaling (fitted on HaluEval QA);
- ``fitted (out of fold)``: a Platt scaling fitted on the other folds' questions
  (:func:`logitjudge.engine.calibration.fit_scaling`, as ``logitjudge calibrate`` fits an
  evaluator scaling) and applied to this fold's, 5 folds by question (sklearn ``GroupKFold``):
  each row's probability comes from a scaling that never saw its question. The fitting rows are
  balanced by class first (the majority class subsampled, seeded), so 0.5 is the cut of equal
  priors, which balanced accuracy, LLM-AggreFact's measure, scores;
- ``best cut``: the threshold chosen on the same rows (optimistic, an upper bound).

Balanced accuracy (``sklearn.metrics.balanced_accuracy_score``), AUROC, ECE (10 equal-width bins
on the rows reweighted to equal classes, so it speaks of the balanced prior the fit aims at),
Brier, and 95% intervals from a cluster bootstrap over questions
(:func:`logitjudge.rubrics.samples.bootstrap_interval`). Then the scaling fitted on every row
(what a shipped file would hold) applied to the committed faithfulness runs of the other sources
(``threshold_transfer.py``'s): their accuracy at 0.5 beside the shipped scaling's.

    python benchmarks/quality/grounding_scaling.py RAW.jsonl \
        [--data ../shared/data/train/expertqa_grounding/train.jsonl] [--tag expertqa]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import balanced_accuracy_score, brier_score_loss, roc_auc_score
from sklearn.model_selection import GroupKFold

sys.path.insert(0, str(Path(__file__).resolve().parent))  # quality.py, threshold_transfer.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results

from _results import RESULTS, run_metadata, write_result  # noqa: E402
from quality import best_threshold_accuracy  # noqa: E402
from threshold_transfer import MODEL, SOURCES, platt, raw_score, shipped_calibration, source_scores  # noqa: E402

from logitjudge.engine.answers import noul_distribution  # noqa: E402
from logitjudge.engine.calibration import EVALUATOR_BIAS_RANGE, LabelledDistribution, Scaling, fit_scaling  # noqa: E402
from logitjudge.rubrics.samples import bootstrap_interval  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared/data/train/expertqa_grounding/train.jsonl"


def read_claims(raw: Path, data: Path, noul: Scaling | None) -> dict[str, np.ndarray]:
    """``{"id", "score", "gold", "group", "system"}`` of the run's ok faithfulness v2 rows.

    Raises:
        ValueError: the run was made under a calibration, or a row's id is not in ``data``.
    """
    meta = {}
    with data.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                meta[str(row["id"])] = row.get("meta") or {}
    out: dict[str, list[Any]] = {k: [] for k in ("id", "score", "gold", "group", "system")}
    with raw.open(encoding="utf-8") as f:
        for line in f:
            r = json.loads(line) if line.strip() else {}
            res = (r.get("results") or {}).get("faithfulness")
            passed = ((r.get("gold") or {}).get("passed") or {}).get("faithfulness")
            if not res or res.get("status") != "ok" or str(res.get("version")) != "2" or not isinstance(passed, bool):
                continue
            if res.get("x_score_uncalibrated") is not None:
                raise ValueError(f"{raw}: scored under a calibration; run with --calibration none")
            if str(r["id"]) not in meta:
                raise ValueError(f"{raw}: row {r['id']!r} is not in {data}")
            m = meta[str(r["id"])]
            out["id"].append(str(r["id"]))
            out["score"].append(raw_score(res, noul))
            out["gold"].append(passed)
            out["group"].append(str(m.get("group", r["id"])))
            out["system"].append(str(m.get("system", "-")))
    return {k: np.asarray(v) for k, v in out.items()}


def balanced_fit(score: np.ndarray, gold: np.ndarray, groups: np.ndarray, seed: int) -> Scaling:
    """A Platt scaling fitted on ``score`` after subsampling the majority class to the minority's size."""
    rng = np.random.default_rng(seed)
    yes, no = np.flatnonzero(gold), np.flatnonzero(~gold)
    small, large = (yes, no) if len(yes) < len(no) else (no, yes)
    keep = np.concatenate([small, rng.choice(large, size=len(small), replace=False)])
    samples = [
        LabelledDistribution("noul", noul_distribution(float(score[i])), 0 if gold[i] else 1, str(groups[i]))
        for i in sorted(keep)
    ]
    scaling, _ = fit_scaling(samples, allow_bias=True, bias_range=EVALUATOR_BIAS_RANGE)
    return scaling


def balanced_ece(p: np.ndarray, gold: np.ndarray, bins: int = 10) -> float:
    """ECE over 10 equal-width bins, each row weighted so that both classes weigh the same."""
    w = np.where(gold, 0.5 / max(1, gold.sum()), 0.5 / max(1, (~gold).sum()))
    idx = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            total += abs(float(np.average(gold[m], weights=w[m]) - np.average(p[m], weights=w[m]))) * w[m].sum()
    return total


def figures(p: np.ndarray, gold: np.ndarray, groups: np.ndarray, resamples: int, seed: int) -> dict[str, Any]:
    """Balanced accuracy at 0.5, AUROC, balanced ECE and Brier, with cluster-bootstrap intervals."""

    def interval(fn: Any) -> Any:
        return bootstrap_interval(fn, groups.tolist(), resamples=resamples, seed=seed)

    def bacc(i: Any) -> float | None:
        return float(balanced_accuracy_score(gold[i], p[i] >= 0.5)) if 0 < gold[i].sum() < len(i) else None

    def auc(i: Any) -> float | None:
        return float(roc_auc_score(gold[i], p[i])) if 0 < gold[i].sum() < len(i) else None

    return {
        "balanced_accuracy": {"value": bacc(np.arange(len(p))), "ci": interval(bacc)},
        "auroc": {"value": auc(np.arange(len(p))), "ci": interval(auc)},
        "ece_balanced": balanced_ece(p, gold),
        "brier": float(brier_score_loss(gold, p)),
        "passes": int((p >= 0.5).sum()),
    }


def measure(raw: Path, data: Path, folds: int = 5, resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Every figure of the module docstring."""
    shipped_path, shipped = shipped_calibration()
    noul, platt_shipped = shipped.scalings.get("noul:2"), shipped.evaluators["faithfulness@2"]
    d = read_claims(raw, data, noul)
    score, gold, groups = d["score"], d["gold"], d["group"]
    out_of_fold = np.zeros_like(score)
    fold_scalings = []
    for k, (train, test) in enumerate(GroupKFold(n_splits=folds).split(score, groups=groups)):
        scaling = balanced_fit(score[train], gold[train], groups[train], seed + k)
        fold_scalings.append([scaling.temperature, scaling.bias])
        out_of_fold[test] = platt(scaling, score[test])
    readers = {
        "uncalibrated": score,
        "shipped": platt(platt_shipped, score),
        "fitted (out of fold)": out_of_fold,
    }
    result: dict[str, Any] = {
        "rows": int(len(score)),
        "gold_passes": int(gold.sum()),
        "questions": int(len(set(groups.tolist()))),
        "readers": {name: figures(p, gold, groups, resamples, seed) for name, p in readers.items()},
        "best_cut_balanced_accuracy": max(
            float(balanced_accuracy_score(gold, score >= c)) for c in np.unique(score).tolist() + [1.1]
        ),
        "best_cut_accuracy": best_threshold_accuracy(gold, score),
        "fold_scalings": fold_scalings,
        "per_system": {},
    }
    for system in sorted(set(d["system"].tolist())):
        m = d["system"] == system
        result["per_system"][system] = {
            "rows": int(m.sum()),
            "gold_passes": int(gold[m].sum()),
            **{
                name: float(balanced_accuracy_score(gold[m], p[m] >= 0.5)) if 0 < gold[m].sum() < m.sum() else None
                for name, p in readers.items()
            },
        }
    everything = balanced_fit(score, gold, groups, seed)
    result["fitted_on_every_row"] = {"temperature": everything.temperature, "bias": everything.bias}
    transfer = {}
    for name, tag in SOURCES.items():
        other = source_scores(RESULTS / f"quality-{MODEL}-{tag}.json", noul)
        g = other["gold"].astype(bool)
        passes = {
            "shipped": platt(platt_shipped, other["score"]) >= 0.5,
            "fitted": platt(everything, other["score"]) >= 0.5,
        }
        transfer[name] = {"n": int(len(g)), "gold_passes": int(g.sum())}
        for reader, passed in passes.items():
            transfer[name][reader] = float((passed == g).mean())
            transfer[name][f"{reader}_balanced"] = float(balanced_accuracy_score(g, passed))
    result["other_sources"] = transfer
    return {
        "model": MODEL,
        "raw": str(raw),
        "data": str(data),
        "shipped": shipped_path.name,
        "shipped_faithfulness_platt": [platt_shipped.temperature, platt_shipped.bias],
        "config": {"folds": folds, "resamples": resamples, "seed": seed},
        "result": result,
    }


def _ci(fig: dict[str, Any]) -> str:
    ci = fig.get("ci")
    return f"{fig['value']:.3f} [{ci['lo']:.2f}, {ci['hi']:.2f}]" if ci else f"{fig['value']:.3f}"


def _platt_text(temperature: float, bias: Any) -> str:
    return f"T = {temperature:.3f}, b = {bias[0]:+.3f}" if bias else f"T = {temperature:.3f}, no bias"


def markdown(record: dict[str, Any]) -> str:
    r = record["result"]
    meta = record["metadata"]
    lines = [
        f"# faithfulness v2's per-claim probability on {r['rows']} claims of {r['questions']} questions ({record['model']})",
        "",
        f"`{record['command']}`",
        "",
        f"{meta['date']}, commit {meta.get('git_sha', '?')}. Raw run `{record['raw']}` on `{record['data']}`; "
        f"{r['gold_passes']} of {r['rows']} claims grounded. At the 0.5 threshold; 95% cluster-bootstrap "
        "intervals over questions; ECE on rows reweighted to equal classes.",
        "",
        "| reader | balanced accuracy | AUROC | ECE (balanced) | Brier | passes |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name, f in r["readers"].items():
        lines.append(
            f"| {name} | {_ci(f['balanced_accuracy'])} | {_ci(f['auroc'])} | {f['ece_balanced']:.3f} | "
            f"{f['brier']:.3f} | {f['passes']} |"
        )
    lines += [
        f"| best cut on these rows (optimistic) | {r['best_cut_balanced_accuracy']:.3f} | | | | |",
        "",
        "Per system (balanced accuracy at 0.5):",
        "",
        "| system | rows (grounded) | uncalibrated | shipped | fitted (out of fold) |",
        "|---|--:|--:|--:|--:|",
    ]
    for system, s in r["per_system"].items():
        vals = [s[k] for k in ("uncalibrated", "shipped", "fitted (out of fold)")]
        shown = " | ".join("n/a" if v is None else f"{v:.3f}" for v in vals)
        lines.append(f"| {system} | {s['rows']} ({s['gold_passes']}) | {shown} |")
    t = r["fitted_on_every_row"]
    shipped_t, shipped_b = record["shipped_faithfulness_platt"]
    lines += [
        "",
        f"Fitted on every row (balanced): {_platt_text(t['temperature'], t['bias'])}; the shipped scaling "
        f"{_platt_text(shipped_t, shipped_b)}. Applied to the committed runs of other sources "
        "(accuracy at 0.5; balanced accuracy):",
        "",
        "| source | n (gold passes) | shipped | fitted here | shipped, balanced | fitted here, balanced |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name, s in r["other_sources"].items():
        lines.append(
            f"| {name} | {s['n']} ({s['gold_passes']}) | {s['shipped']:.3f} | {s['fitted']:.3f} | "
            f"{s['shipped_balanced']:.3f} | {s['fitted_balanced']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", help="an uncalibrated `logitjudge evaluate` results file of faithfulness rows")
    ap.add_argument("--data", default=str(DATA), help="the data file it ran on (meta.group, meta.system)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="expertqa")
    ap.add_argument("--out-dir", default=str(RESULTS))
    args = ap.parse_args(argv)
    record = measure(Path(args.raw), Path(args.data), args.folds, args.resamples, args.seed)
    record["command"] = " ".join(
        ["python", "benchmarks/quality/grounding_scaling.py", *(sys.argv[1:] if argv is None else argv)]
    )
    record["metadata"] = run_metadata()
    text = markdown(record)
    write_result(Path(args.out_dir), f"grounding-scaling-{MODEL}-{args.tag}", record, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
