"""Grounding: is each retrieved passage's verdict on a claim right? LLM-AggreFact's protocol.

    python benchmarks/quality/grounding.py [--model qwen2.5-coder-1.5b] [--adapters DIR[,DIR]]
        [--sets factcheckgpt_chunk_support,vitaminc] [--set-limits factcheckgpt_chunk_support=30]
        [--seed 0] [--faithfulness-only] [--dtype float32] [--tag NAME]
        [--rebuild benchmarks/results/grounding-....json]

Per (claim, passage) cell, ``chunk_support@4`` answers "supports / contradicts / unrelated" over
the passage alone. One run answers every cell twice in the same process: with the branch adapters
given by ``--adapters`` (the adapter bound to ``chunk_support@4`` answers its questions) and
without them (``base``: for the default model the shipped head reads the question, and its
``x_features`` carry the zero-shot readout of the same branch, reported as ``zero_shot``; for a
model without a head, version 3's zero-shot answer). The state cache keeps each passage's KV
between the two, so the second pass runs the branches only.

Figures per reader (LLM-AggreFact, Tang et al. 2024: balanced accuracy of the binary decision at
P = 0.5, no threshold tuned on the set):

- ``supports`` decision: balanced accuracy at P(supports) >= 0.5 and AUROC of P(supports); the
  positive class is a passage that completely supports (partial support is left out; the
  ``_partial_as_support`` figures count it as support);
- calibration of P(supports): ECE (10 equal-width bins, Guo et al. 2017) beside the ECE a perfectly
  calibrated predictor shows at this n, Brier score (scikit-learn), and a reliability diagram;
- three-way accuracy and macro-F1 on the cells that are not partial support; recall of
  ``contradicts`` (label = the most probable option) on the contradicting cells;
- baselines: the share of the claim's content words (3+ letters) found in the passage, and the
  passage's length, as AUROC of the ``supports`` decision;
- FactCheck-GPT's claim level: a claim is grounded when some passage completely supports it (claims
  whose best passage only partly does are left out), P(grounded) = the largest P(supports) over its
  passages (MiniCheck's aggregation over chunks, and a located verdict's score): balanced accuracy
  at 0.5 and AUROC;
- on the same claims, ``faithfulness@2`` asked of the claim over all its passages (the question
  and the claim as the item; with a bound adapter in the adapter pass, its P(yes); without, the
  contrast score): balanced accuracy at 0.5, AUROC, ECE and Brier (``--faithfulness-only`` asks
  only this).

The training folder's grounding sets (``--sets expertqa_grounding,factcg_grounding``: ExpertQA's
expert-labelled RAG claims, FactCG's balanced ``cg2c_doc`` claims) are claim sets with a label per
claim only (``gold.faithful``): each chunk of a row's context is a passage, and the claim level above
is reported (chunk_support's largest P(supports) and faithfulness@2 per claim) beside the claim's
word overlap with its best chunk (FactCG's known shortcut) as a baseline. They are held out for any
adapter not trained on them; an adapter whose binding names one of their files is refused there (its
figures would be in-distribution).

Every figure carries a 95% percentile-bootstrap interval over source items (a FactCheck-GPT
response, whose claims share pages; a VitaminC row; an ExpertQA question or a FactCG group). Writes
``benchmarks/results/grounding-<model>[-tag].{json,md}`` and ``-reliability.png``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import balanced_accuracy_score, brier_score_loss, f1_score, roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
sys.path.insert(0, str(Path(__file__).resolve().parent))  # rag_quality's bootstrap
from _results import DATA, RESULTS, run_metadata  # noqa: E402
from rag_quality import _cell, figure  # noqa: E402

from logitjudge.engine.config import DTYPE_CHOICES  # noqa: E402

SETS = ("factcheckgpt_chunk_support", "vitaminc")
EVALUATOR = "chunk_support@4"
FAITHFULNESS = "faithfulness@2"
TRAIN_SETS = ("expertqa_grounding", "factcg_grounding")  # ../shared/data/train: a label per claim only
CLAIM_SETS = ("factcheckgpt_chunk_support", *TRAIN_SETS)  # sets whose rows are a claim with all of its passages
SUPPORT = ("supports", "contradicts", "unrelated")
READERS = ("adapter", "base", "zero_shot")
ITEM_FIELDS = ("id", "input", "output", "context")


def unit_of(name: str, row: Mapping[str, Any]) -> str:
    """The bootstrap unit: a FactCheck-GPT response (its claims share pages), else the row."""
    if name == "factcheckgpt_chunk_support":
        return f"response:{row['meta']['response_index']}"
    if name in TRAIN_SETS:  # an ExpertQA question's claims, a FactCG claim's contrastive pair
        return f"group:{row['meta']['group']}"
    return str(row["id"])


def set_file(name: str, data: Path = DATA) -> Path:
    return data / "train" / name / "train.jsonl" if name in TRAIN_SETS else data / name / "dev.jsonl"


def load_rows(name: str, limit: int | None, seed: int, data: Path = DATA) -> list[dict[str, Any]]:
    """The set's chunk_support rows (a training set's faithfulness rows: FactCG's balanced
    ``cg2c_doc`` subset); with ``limit``, a seeded sample of that many whole units."""
    rows = [json.loads(line) for line in set_file(name, data).read_text(encoding="utf-8").splitlines()]
    if name in TRAIN_SETS:
        rows = [r for r in rows if r["meta"].get("subset", "cg2c_doc") == "cg2c_doc"]
    else:
        rows = [r for r in rows if r["evaluator"] == "chunk_support"]
    if limit is None:
        return rows
    units = sorted({unit_of(name, r) for r in rows})
    random.Random(seed).shuffle(units)
    keep = set(units[:limit])
    return [r for r in rows if unit_of(name, r) in keep]


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) >= 3}


def cells_of(
    name: str, rows: Sequence[Mapping[str, Any]], results: Mapping[str, Sequence[Any]]
) -> list[dict[str, Any]]:
    """One record per (claim, passage) cell: gold, partial flag, unit, baselines, and per reader
    P(option) by option name. ``results``: per pass ("adapter", "base"), the rows' result dicts."""
    out = []
    for k, r in enumerate(rows):
        partial = set(r["gold"].get("partial_cells") or ())
        claim = content_words(str(r["output"]))
        done = {p: results[p][k] for p in results if results[p][k] is not None}  # None: chunk_support not asked
        if any(res.get("status") != "ok" for res in done.values()):
            continue
        per_chunk = r["gold"].get("per_chunk") or [None] * len(r["context"])  # None: a label per claim only
        for i, (gold, chunk) in enumerate(zip(per_chunk, r["context"], strict=True)):
            cell: dict[str, Any] = {
                "row": str(r["id"]),
                "complete": (r["gold"].get("stance") or [None] * len(r["context"]))[i] == "completely-support",
                "claim_gold": r["gold"].get("faithful"),
                "unit": unit_of(name, r),
                "gold": gold,
                "partial": i in partial,
                "overlap": len(claim & content_words(str(chunk))) / max(1, len(claim)),
                "chars": len(str(chunk)),
            }
            if "adapter" in done:
                cell["adapter"] = done["adapter"]["details"][i]["probabilities"]
            if "base" in done:
                d = done["base"]["details"][i]
                cell["base"] = d["probabilities"]
                feats = d.get("x_features") or {}
                if all(f"zero_shot_{o}" in feats for o in SUPPORT):
                    cell["zero_shot"] = {o: feats[f"zero_shot_{o}"] for o in SUPPORT}
            out.append(cell)
    return out


def _units(cells: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    by: dict[str, list[Mapping[str, Any]]] = {}
    for c in cells:
        by.setdefault(c["unit"], []).append(c)
    return list(by.values())


def _flat(us: Sequence[Sequence[Mapping[str, Any]]]) -> list[Mapping[str, Any]]:
    return [c for u in us for c in u]


def reader_figures(cells: Sequence[Mapping[str, Any]], reader: str, resamples: int, seed: int) -> dict[str, Any]:
    """The figures of one reader (``adapter``, ``base``, ``zero_shot``) over the cells it answered."""
    from logitjudge.rubrics.aggregate import ece_noise_floor, expected_calibration_error

    units = _units([c for c in cells if reader in c])

    def binary(us: Any, partial_as_support: bool = False) -> tuple[list[bool], list[float]]:
        keep = [c for c in _flat(us) if partial_as_support or not c["partial"]]
        return [c["gold"] == "supports" for c in keep], [c[reader]["supports"] for c in keep]

    def bacc(us: Any, partial: bool = False) -> float:
        y, p = binary(us, partial)
        return float(balanced_accuracy_score(y, [x >= 0.5 for x in p]))

    def auroc(us: Any, partial: bool = False) -> float:
        y, p = binary(us, partial)
        return float(roc_auc_score(y, p))

    def three_way(us: Any) -> tuple[list[str], list[str]]:
        keep = [c for c in _flat(us) if not c["partial"]]
        return [c["gold"] for c in keep], [max(c[reader], key=c[reader].get) for c in keep]

    def contradicts_recall(us: Any) -> float | None:
        got = [max(c[reader], key=c[reader].get) for c in _flat(us) if c["gold"] == "contradicts"]
        return float(np.mean([g == "contradicts" for g in got])) if got else None

    y, p = binary(units)
    return {
        "balanced_accuracy_supports": figure(units, bacc, resamples, seed),
        "auroc_supports": figure(units, auroc, resamples, seed),
        "balanced_accuracy_partial_as_support": figure(units, lambda us: bacc(us, True), resamples, seed),
        "auroc_partial_as_support": figure(units, lambda us: auroc(us, True), resamples, seed),
        "ece_supports": figure(units, lambda us: expected_calibration_error(*binary(us)[::-1]), resamples, seed),
        "ece_floor_at_this_n": {"value": ece_noise_floor(p), "ci": None, "n": len(units)},
        "brier_supports": figure(units, lambda us: float(brier_score_loss(*binary(us))), resamples, seed),
        "accuracy_3way": figure(
            units, lambda us: float(np.mean([g == q for g, q in zip(*three_way(us))])), resamples, seed
        ),
        "macro_f1_3way": figure(
            units,
            lambda us: float(f1_score(*three_way(us), labels=list(SUPPORT), average="macro", zero_division=0)),
            resamples,
            seed,
        ),
        "recall_contradicts": figure(units, contradicts_recall, resamples, seed),
        "share_called_supports": figure(
            units, lambda us: float(np.mean([x >= 0.5 for x in binary(us)[1]])), resamples, seed
        ),
        "cells": {"value": float(len(y)), "ci": None, "n": len(units)},
    }


def claims_of(
    cells: Sequence[Mapping[str, Any]], faithfulness: Mapping[str, Mapping[str, float]]
) -> list[dict[str, Any]]:
    """The claim level: one record per claim with ``y`` (grounded: the claim's own label where the
    set has one, ``claim_gold``; else FactCheck-GPT's: some passage completely supports it, and
    claims whose best passage only partly supports it are left out), ``overlap`` (the largest share
    of the claim's content words found in one passage) and, per reader, P(grounded): for a
    chunk_support reader the largest P(supports) over the claim's passages (MiniCheck's aggregation
    over document chunks; the ``score`` of a located verdict), for ``faithfulness_<pass>``
    faithfulness's score of the claim over all its passages."""
    rows: dict[str, list[Mapping[str, Any]]] = {}
    for c in cells:
        rows.setdefault(c["row"], []).append(c)
    claims = []
    for rid, cs in rows.items():
        labelled = cs[0].get("claim_gold")
        grounded = bool(labelled) if labelled is not None else any(c["complete"] for c in cs)
        if labelled is None and not grounded and any(c["partial"] for c in cs):
            continue
        claim: dict[str, Any] = {"unit": cs[0]["unit"], "y": grounded, "overlap": max(c["overlap"] for c in cs)}
        for r in READERS:
            if all(r in c for c in cs):
                claim[r] = max(c[r]["supports"] for c in cs)
        for p, score in (faithfulness.get(rid) or {}).items():
            claim[f"faithfulness_{p}"] = score
        claims.append(claim)
    return claims


def faithfulness_passes(claims: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ``faithfulness_<pass>`` readers that :func:`claims_of` found, sorted."""
    return sorted({k for c in claims for k in c if k.startswith("faithfulness_")})


def claim_readers(name: str, claims: Sequence[Mapping[str, Any]]) -> list[str]:
    """The readers a set's claim-level figures and plot report on their own: the chunk_support
    readers where the claim level is all the set has (a label per claim), then faithfulness's passes.
    (On FactCheck-GPT the chunk_support readers' claim figures join their per-passage ones.)"""
    chunk = [r for r in READERS if any(r in c for c in claims)] if name in TRAIN_SETS else []
    return chunk + faithfulness_passes(claims)


def claim_figures(claims: Sequence[Mapping[str, Any]], reader: str, resamples: int, seed: int) -> dict[str, Any]:
    """Balanced accuracy at P(grounded) >= 0.5, AUROC, ECE and Brier of one reader over
    :func:`claims_of`'s claims (bootstrap over responses)."""
    from logitjudge.rubrics.aggregate import expected_calibration_error

    units = _units([c for c in claims if reader in c])

    def yp(us: Any) -> tuple[list[bool], list[float]]:
        flat = _flat(us)
        return [c["y"] for c in flat], [c[reader] for c in flat]

    def bacc(us: Any) -> float:
        y, p = yp(us)
        return float(balanced_accuracy_score(y, [x >= 0.5 for x in p]))

    return {
        "claim_balanced_accuracy": figure(units, bacc, resamples, seed),
        "claim_auroc": figure(units, lambda us: float(roc_auc_score(*yp(us))), resamples, seed),
        "claim_ece": figure(units, lambda us: expected_calibration_error(*yp(us)[::-1]), resamples, seed),
        "claim_brier": figure(units, lambda us: float(brier_score_loss(*yp(us))), resamples, seed),
        "claims": {"value": float(len(_flat(units))), "ci": None, "n": len(units)},
    }


def claim_baseline_figures(claims: Sequence[Mapping[str, Any]], resamples: int, seed: int) -> dict[str, Any]:
    """The claim's largest word overlap with one passage as a reader of P(grounded): its AUROC, and
    the share of grounded claims."""
    units = _units(claims)

    def auroc(us: Any) -> float:
        return float(roc_auc_score([c["y"] for c in _flat(us)], [c["overlap"] for c in _flat(us)]))

    return {
        "baseline_claim_word_overlap_auroc": figure(units, auroc, resamples, seed),
        "gold_share_grounded": figure(units, lambda us: float(np.mean([c["y"] for c in _flat(us)])), resamples, seed),
    }


def baseline_figures(cells: Sequence[Mapping[str, Any]], resamples: int, seed: int) -> dict[str, Any]:
    units = _units(cells)

    def auroc(us: Any, key: str) -> float:
        keep = [c for c in _flat(us) if not c["partial"]]
        return float(roc_auc_score([c["gold"] == "supports" for c in keep], [c[key] for c in keep]))

    def share(us: Any) -> float:
        keep = [c for c in _flat(us) if not c["partial"]]
        return float(np.mean([c["gold"] == "supports" for c in keep]))

    return {
        "baseline_claim_word_overlap_auroc": figure(units, lambda us: auroc(us, "overlap"), resamples, seed),
        "baseline_passage_length_auroc": figure(units, lambda us: auroc(us, "chars"), resamples, seed),
        "gold_share_supports": figure(units, share, resamples, seed),
    }


def figures_of(record: Mapping[str, Any], resamples: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, block in record["sets"].items():
        cells = block["cells"]
        if name in TRAIN_SETS:  # a label per claim only: the claim level, and its word-overlap baseline
            claims = claims_of(cells, block.get("faithfulness") or {})
            out[name] = {r: claim_figures(claims, r, resamples, seed) for r in claim_readers(name, claims)}
            out[name]["baselines"] = claim_baseline_figures(claims, resamples, seed)
            continue
        out[name] = {r: reader_figures(cells, r, resamples, seed) for r in READERS if any(r in c for c in cells)}
        if name in CLAIM_SETS:
            claims = claims_of(cells, block.get("faithfulness") or {})
            for r in list(out[name]):
                out[name][r].update(claim_figures(claims, r, resamples, seed))
            readers = faithfulness_passes(claims)
            if readers:
                out[f"{name} (claims, faithfulness)"] = {r: claim_figures(claims, r, resamples, seed) for r in readers}
        out[name]["baselines"] = baseline_figures(cells, resamples, seed)
    return out


def markdown(record: Mapping[str, Any]) -> str:
    meta = record["metadata"]
    lines = [
        f"# Grounding, per (claim, passage) cell: {record['model']}",
        "",
        f"`{record['command']}`; {meta.get('date')}, commit {meta.get('git_sha', '?')}"
        f"{' (uncommitted changes)' if meta.get('git_dirty') else ''}, torch {meta.get('torch')}, "
        f"{meta.get('device')} ({meta.get('device_name')}), precision {record['engine'].get('precision')}.",
        f"Adapters: {', '.join(record.get('adapters') or []) or 'none'}. "
        "Each cell: value [95% bootstrap interval over source items]; n = source items.",
        "",
    ]
    for name, by_reader in record["figures"].items():
        readers = [r for r in by_reader if r != "baselines"]
        cols = readers or ["value"]  # only the baselines: no reader ran on the cells
        lines += [f"## {name}", "", "| metric | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for metric in by_reader[readers[0]] if readers else ():
            lines.append(f"| {metric} | " + " | ".join(_cell(by_reader[r].get(metric)) for r in readers) + " |")
        for metric, fig in by_reader.get("baselines", {}).items():
            lines.append(f"| {metric} | {_cell(fig)} |" + " |" * (len(cols) - 1))
        lines.append("")
    return "\n".join(lines)


def reliability_png(record: Mapping[str, Any], path: Path) -> None:
    """A reliability diagram per set: P(supports) per cell and reader, and on the claim sets
    faithfulness's P(grounded) per claim and pass (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from logitjudge.rubrics.aggregate import expected_calibration_error, reliability_bins

    panels: list[tuple[str, str, str, list[tuple[str, list[float], list[bool]]]]] = []
    for name, block in record["sets"].items():
        cells = [c for c in block["cells"] if not c["partial"] and c["gold"] is not None]
        curves = [
            (r, [c[r]["supports"] for c in cells if r in c], [c["gold"] == "supports" for c in cells if r in c])
            for r in READERS
        ]
        if cells:
            panels.append((f"{name} (n={len(cells)} cells)", "P(supports)", "share that supports", curves))
        claims = claims_of(block["cells"], block.get("faithfulness") or {}) if name in CLAIM_SETS else []
        passes = claim_readers(name, claims)
        if passes:
            curves = [(k, [c[k] for c in claims if k in c], [c["y"] for c in claims if k in c]) for k in passes]
            panels.append((f"{name}, claims (n={len(claims)})", "P(grounded)", "share grounded", curves))
    if not panels:  # no reader answered anything to plot
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4.2), squeeze=False)
    for ax, (title, xlabel, ylabel, curves) in zip(axes[0], panels):
        for (label, p, y), style in zip(curves, ("o-", "s-", "^--", "d-.", "v:")):
            if not p:
                continue
            bins = reliability_bins(p, y)
            ece = expected_calibration_error(p, y)
            ax.plot(
                [b["mean_score"] for b in bins], [b["frac_true"] for b in bins], style, label=f"{label} (ECE {ece:.3f})"
            )
        ax.plot([0, 1], [0, 1], "k:", lw=1)
        ax.set(xlim=(0, 1), ylim=(0, 1), title=title, xlabel=xlabel, ylabel=ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _trained_on(binding: Mapping[str, Any], name: str) -> bool:
    """Whether an adapter's binding says it trained on rows of this set: among its rows' sources
    (the ids' prefix, e.g. ``expertqa_grounding:12``), or among its data files (the set's folder, or
    a file named after its source, ``factcg_...``: a sample drawn from it), or in the record of an
    adapter it started from (``trained.init``, followed down the chain)."""
    from logitjudge.fit.adapter_parts import init_chain

    for trained in init_chain(binding.get("trained")):
        files = [Path(str(d)) for d in trained.get("data") or ()]
        if name in (trained.get("sources") or ()) or any(
            name in d.parts or d.name.startswith(name.split("_")[0]) for d in files
        ):
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default=None, help="model name or path (default: the main model)")
    ap.add_argument(
        "--adapters", default=None, help="branch adapter folders (comma-separated), or shipped (the package's)"
    )
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated sets")
    ap.add_argument("--set-limits", default="", help="source items per set, e.g. factcheckgpt_chunk_support=30")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=4, help="items per engine batch")
    ap.add_argument("--state-cache-mb", type=int, default=4096, help="state KV kept between the two passes")
    ap.add_argument(
        "--dtype",
        default=None,
        choices=DTYPE_CHOICES,
        help="engine precision (default auto: bf16 on GPUs, fp16 where they lack it; on a CPU with native "
        "bf16 mixed, else float32); give float32 to compare with figures measured in float32",
    )
    ap.add_argument(
        "--faithfulness-only",
        action="store_true",
        help="ask only faithfulness, on the claim sets (the per-passage readers are not run)",
    )
    ap.add_argument("--tag", default="")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    ap.add_argument("--rebuild", type=Path, default=None, help="recompute figures and tables of an earlier run")
    args = ap.parse_args(argv)

    if args.rebuild:
        record = json.loads(args.rebuild.read_text(encoding="utf-8"))
        record["figures"] = figures_of(record, args.resamples, args.seed)
        args.rebuild.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        args.rebuild.with_suffix(".md").write_text(markdown(record), encoding="utf-8")
        reliability_png(record, args.rebuild.with_name(args.rebuild.stem + "-reliability.png"))
        print(markdown(record))
        return 0

    import warnings

    from sklearn.exceptions import UndefinedMetricWarning
    from tqdm import tqdm

    warnings.filterwarnings("ignore", category=UndefinedMetricWarning)  # a one-class resample: skipped
    warnings.filterwarnings("ignore", message="y_pred contains classes not in y_true")

    from logitjudge import Judge
    from logitjudge.engine.adapters import SHIPPED, shipped_folders

    adapters = [a for a in (args.adapters or "").split(",") if a]
    if adapters == [SHIPPED]:  # the package's folders (those bound to the model load)
        adapters = [str(p) for p in shipped_folders(None)]
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    for folder in adapters:  # before the model loads: a set an adapter trained on is refused at once
        binding_file = Path(folder) / "logitjudge_adapter.json"
        binding = json.loads(binding_file.read_text(encoding="utf-8")) if binding_file.is_file() else {}
        trained_on = [name for name in sets if name in TRAIN_SETS and _trained_on(binding, name)]
        if trained_on:
            ap.error(
                f"{folder} was trained on rows of {', '.join(trained_on)}: its figures there would not be held out"
            )
    judge = Judge.load(
        args.model,
        calibration="shipped",
        adapters=args.adapters if args.adapters == SHIPPED else adapters or "none",
        state_cache_mb=args.state_cache_mb,
        dtype=args.dtype,
    )
    installed = list(judge.engine.adapters.values())
    record: dict[str, Any] = {
        "command": "python benchmarks/quality/grounding.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": judge.model_name,
        "engine": judge.describe(),
        "adapters": [a.name for a in installed],
        "adapter_bindings": {a.name: {k: a.binding.get(k) for k in ("evaluator", "trained")} for a in installed},
        "config": {"seed": args.seed, "resamples": args.resamples},
        "sets": {},
    }
    record["metadata"] = run_metadata(device=str(judge.describe().get("device", "cpu")))
    limits = {k: int(v) for k, v in (kv.split("=") for kv in args.set_limits.split(",") if kv.strip())}
    record["config"]["set_limits"] = limits
    passes = (["adapter"] if installed else []) + ["base"]
    for name in sets:
        rows = load_rows(name, limits.get(name), args.seed, args.data)
        results: dict[str, list[Any]] = {p: [] for p in passes}
        evaluators = ([] if args.faithfulness_only else [EVALUATOR]) + ([FAITHFULNESS] if name in CLAIM_SETS else [])
        if not evaluators:
            continue
        faithfulness: dict[str, dict[str, float]] = {}
        seconds = dict.fromkeys(passes, 0.0)
        bar = tqdm(total=len(rows), desc=name, unit="row")
        for k in range(0, len(rows), args.batch_size):
            items = [{f: r[f] for f in ITEM_FIELDS if r.get(f) is not None} for r in rows[k : k + args.batch_size]]
            for p in passes:  # the same items with and without the adapters: the states come from the cache
                judge.engine.set_adapters(installed if p == "adapter" else [])
                t0 = time.perf_counter()
                run = judge.evaluate(items, evaluators, batch_size=args.batch_size)
                seconds[p] += time.perf_counter() - t0
                results[p] += [
                    res.results["chunk_support"].model_dump(mode="json", exclude_none=True)
                    if "chunk_support" in res.results
                    else None
                    for res in run.results
                ]
                for item, res in zip(items, run.results, strict=True):
                    faith = res.results.get("faithfulness")
                    if faith is not None and faith.status == "ok" and faith.score is not None:
                        faithfulness.setdefault(str(item["id"]), {})[p] = float(faith.score)
            bar.update(len(items))
        bar.close()
        judge.engine.set_adapters(installed)
        cells = cells_of(name, rows, results)
        record["sets"][name] = {
            "rows": len(rows),
            "rows_not_ok": len(rows) - len({c["row"] for c in cells}),  # an item some pass failed: left out
            "seconds_per_row": {p: seconds[p] / max(1, len(rows)) for p in passes},
            "cells": cells,
            "faithfulness": faithfulness,  # per claim row, per pass: faithfulness@2's score over all passages
            # claim rows where faithfulness was asked and some pass gave no ok score: left out of its figures
            "faithfulness_not_ok": sum(len(faithfulness.get(str(r["id"]), {})) < len(passes) for r in rows)
            if FAITHFULNESS in evaluators
            else 0,
        }
        print(
            f"{name}: {len(rows)} rows; s/row "
            + ", ".join(f"{p} {s / max(1, len(rows)):.1f}" for p, s in seconds.items()),
            flush=True,
        )
    slug = judge.model_name.split("/")[-1].lower() + (f"-{args.tag}" if args.tag else "")
    out = args.out_dir / f"grounding-{slug}.json"
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")  # the cells first: --rebuild recovers
    record["figures"] = figures_of(record, args.resamples, args.seed)
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(markdown(record), encoding="utf-8")
    reliability_png(record, out.with_name(out.stem + "-reliability.png"))
    print(markdown(record))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
