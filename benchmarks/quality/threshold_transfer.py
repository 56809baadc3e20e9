"""Does one pass threshold transfer between sources? faithfulness v2 on the default model, offline.

Reads the committed quality runs of the default model (no model is loaded), takes each item's
faithfulness v2 contrast score as the engine makes it under the shipped buckets (the noul:2
temperature; before the evaluator's Platt scaling: ``x_score_uncalibrated``, or recomputed from
an uncalibrated run's two P(yes)), and reports per source, accuracy at the 0.5 threshold:

- ``uncalibrated``: the contrast score as it is;
- ``shipped``: under the shipped file's ``faithfulness@2`` Platt scaling (fitted on half of
  HaluEval QA's items, so its HaluEval QA figure is partly in-sample);
- ``pooled (leave one source out)``: a Platt scaling fitted on every *other* source pooled
  (:func:`logitjudge.engine.calibration.fit_scaling`, as ``logitjudge calibrate`` fits evaluator
  scalings), applied to this one: what one shipped scaling fitted on many sources would give on
  a new one;
- ``best cut``: the best threshold chosen on the source's own items (optimistic: an upper bound
  for any fixed cut).

95% intervals: cluster bootstrap over source items (:func:`logitjudge.rubrics.samples.bootstrap_interval`).

    python benchmarks/quality/threshold_transfer.py          # prints the table, writes JSON and markdown
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))  # quality.py beside it
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results

from _results import RESULTS, run_metadata, write_result  # noqa: E402
from quality import best_threshold_accuracy  # noqa: E402

from logitjudge.engine.answers import noul_distribution  # noqa: E402
from logitjudge.engine.calibration import (  # noqa: E402
    EVALUATOR_BIAS_RANGE,
    SHIPPED_DIR,
    Calibration,
    LabelledDistribution,
    Scaling,
    fit_scaling,
)
from logitjudge.rubrics.samples import bootstrap_interval, item_group  # noqa: E402
from logitjudge.rubrics.scoring import contrast_probability  # noqa: E402

MODEL = "qwen2.5-coder-1.5b-instruct"
SOURCES = {  # source -> the committed run of the default model that holds its faithfulness v2 scores
    "halueval_qa": "contrast-haluqa",
    "halueval_dialogue": "halueval_dialogue",
    "halueval_summarization": "halueval_summarization",
    "qags": "qags",
    "wikieval": "wikieval",
}


def source_scores(path: Path, noul_scaling: Scaling | None) -> dict[str, np.ndarray]:
    """``{"score", "gold", "group"}`` of one run's faithfulness v2 items, the score as the shipped
    buckets make it, before the evaluator scaling (see the module docstring)."""
    record = json.loads(path.read_text())
    calibrated = bool(record["environment"]["engine"].get("calibration"))
    score, gold, group = [], [], []
    for rows in record["items"].values():
        for r in rows:
            res = r["results"].get("faithfulness")
            passed = ((r.get("gold") or {}).get("passed") or {}).get("faithfulness")
            if not res or res.get("status") != "ok" or res.get("version") != "2" or not isinstance(passed, bool):
                continue
            score.append(float(res["x_score_uncalibrated"]) if calibrated else raw_score(res, noul_scaling))
            gold.append(passed)
            group.append(item_group(r["id"]))
    return {"score": np.asarray(score), "gold": np.asarray(gold), "group": np.asarray(group)}


def raw_score(res: dict[str, Any], noul_scaling: Scaling | None) -> float:
    """An uncalibrated run's faithfulness v2 result as the shipped buckets would score it: the
    contrast of its two P(yes) under the ``noul:2`` temperature, before the evaluator scaling."""
    s = contrast_probability(res["x_p_yes_with_context"], res["x_p_yes_without_context"])
    return s if noul_scaling is None else Scaling(noul_scaling.temperature).apply(noul_distribution(s))[0]


def shipped_calibration() -> tuple[Path, Calibration]:
    """The default model's shipped calibration file and its contents."""
    path = next(p for p in sorted(SHIPPED_DIR.glob("*.json")) if p.name.startswith(MODEL))
    return path, Calibration.load(path)


def platt(scaling: Scaling, scores: np.ndarray) -> np.ndarray:
    """``scaling`` (a Platt scaling of a yes/no score) applied to each of ``scores``, shape (N,)."""
    return np.asarray([scaling.apply(noul_distribution(float(s)))[0] for s in scores])


def _accuracy(gold: np.ndarray, p: np.ndarray, groups: np.ndarray, resamples: int, seed: int) -> dict[str, Any]:
    hit = ((p >= 0.5) == gold).astype(float)
    ci = bootstrap_interval(lambda i: float(hit[i].mean()), groups.tolist(), resamples=resamples, seed=seed)
    return {"value": float(hit.mean()), "ci": ci, "passes": int((p >= 0.5).sum())}


def measure(resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Per source: n, AUROC, and accuracy at 0.5 uncalibrated, shipped, pooled leave-one-out and at the best cut."""
    shipped_path, shipped = shipped_calibration()
    shipped_platt = shipped.evaluators["faithfulness@2"]
    data = {
        name: source_scores(RESULTS / f"quality-{MODEL}-{tag}.json", shipped.scalings.get("noul:2"))
        for name, tag in SOURCES.items()
    }
    out: dict[str, Any] = {}
    for name, d in data.items():
        others = [
            LabelledDistribution("noul", noul_distribution(float(s)), 0 if g else 1, f"{o}:{grp}")
            for o, od in data.items()
            if o != name
            for s, g, grp in zip(od["score"], od["gold"], od["group"])
        ]
        pooled, _ = fit_scaling(others, allow_bias=True, bias_range=EVALUATOR_BIAS_RANGE)
        gold, score, groups = d["gold"], d["score"], d["group"]
        best = best_threshold_accuracy(gold, score)
        out[name] = {
            "n": int(len(gold)),
            "gold_passes": int(gold.sum()),
            "auroc": float(roc_auc_score(gold, score)),
            "uncalibrated": _accuracy(gold, score, groups, resamples, seed),
            "shipped": _accuracy(gold, platt(shipped_platt, score), groups, resamples, seed),
            "pooled_leave_one_out": {
                **_accuracy(gold, platt(pooled, score), groups, resamples, seed),
                "temperature": pooled.temperature,
                "bias": pooled.bias,
                "fitted_on": int(len(others)),
            },
            "best_cut": {
                "value": best,
                "ci": bootstrap_interval(
                    lambda i, gold=gold, score=score: best_threshold_accuracy(gold[i], score[i]),
                    groups.tolist(),
                    resamples=resamples,
                    seed=seed,
                ),
            },
        }
    return {
        "model": MODEL,
        "shipped": shipped_path.name,
        "shipped_digest": shipped.digest,
        "platt": [shipped_platt.temperature, shipped_platt.bias],
        "sources": out,
    }


def _fmt(fig: dict[str, Any]) -> str:
    ci = fig.get("ci")
    interval = f" [{ci['lo']:.2f}, {ci['hi']:.2f}]" if ci else ""
    passes = f", passes {fig['passes']}" if "passes" in fig else ""
    return f"{fig['value']:.2f}{interval}{passes}"


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Threshold transfer: faithfulness v2 on {result['model']} (offline, from the committed runs)",
        "",
        f"Shipped file {result['shipped']} ({result['shipped_digest']}); accuracy at the 0.5 threshold, "
        "95% cluster-bootstrap interval over source items. 'best cut' is chosen on the same items (optimistic).",
        "",
        "| source | n (gold passes) | AUROC | uncalibrated | shipped Platt | pooled Platt, leave this source out | best cut | shipped − best |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, s in result["sources"].items():
        gap = s["shipped"]["value"] - s["best_cut"]["value"]
        lines.append(
            f"| {name} | {s['n']} ({s['gold_passes']}) | {s['auroc']:.2f} | {_fmt(s['uncalibrated'])} | "
            f"{_fmt(s['shipped'])} | {_fmt(s['pooled_leave_one_out'])} | {_fmt(s['best_cut'])} | {gap:+.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default=str(RESULTS))
    args = ap.parse_args(argv)
    result = measure(args.resamples, args.seed)
    result["command"] = " ".join(
        ["python", "benchmarks/quality/threshold_transfer.py", *(sys.argv[1:] if argv is None else argv)]
    )
    result["metadata"] = run_metadata()
    write_result(Path(args.out_dir), f"threshold-transfer-{MODEL}", result, markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
