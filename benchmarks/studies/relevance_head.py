"""A trained head for chunk_relevance's per-chunk question: fitted on SQuAD, measured on HotpotQA and NovelEval.

    python benchmarks/fits/relevance_rows.py --out .cache/relevance_rows.jsonl
    python benchmarks/studies/relevance_head.py --rows .cache/relevance_rows.jsonl [--cache .cache/features]

What it answers: does a head read from the model's hidden states judge a chunk's relevance as
well as ``chunk_relevance@2`` (a yes/no readout and a likelihood contrast, combined by a logistic
fitted on HotpotQA dev), when it is trained only on the training folder's ``squad_relevance``
rows? The head reads ``chunk_relevance``'s own question (over the chunk alone, quoting the
input) at the layers ``logitjudge fit`` taps by default; layer and C by grouped cross-validation
(``fit_head``, groups = SQuAD articles, 20% of them held out). Then, on rows it never saw:

- HotpotQA dev (``hotpotqa_relevance``, 29 questions x 10 chunks): per-chunk AUROC of the head's
  P(relevant), of the same centred on each question's chunks (the batch calibration
  ``chunk_relevance@2`` applies to its features), and of the question's label readout
  (zero-shot); accuracy at 0.5. Version 2's figures on the same questions are in
  ``benchmarks/results/rag-quality-*.md``.
- NovelEval dev (12 queries x 20 passages, graded 0/1/2): nDCG@10 of the head's P(relevant)
  and of the retrieval order.

95% intervals by bootstrap over questions (scikit-learn metrics). Writes
``benchmarks/results/relevance-head-<model>.{json,md}`` and the head folder (``--out``), which
``logitjudge evaluate --heads`` can load once an evaluator version reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, ndcg_score, roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "quality"))  # rag_quality
from _results import DATA, RESULTS, run_metadata, write_result  # noqa: E402
from rag_quality import figure  # noqa: E402

from logitjudge.fit import default_layers, extract, fit_head, head_examples, write_head  # noqa: E402
from logitjudge.rubrics.dataio import read_rows  # noqa: E402
from logitjudge.rubrics.definitions import HeadDef  # noqa: E402
from logitjudge.rubrics.registry import default_registry  # noqa: E402


def _auroc(units: list[list[tuple[bool, float]]]) -> float:
    flat = [x for u in units for x in u]
    return float(roc_auc_score([g for g, _ in flat], [s for _, s in flat]))


def _figure(units: list[Any], stat: Any) -> dict[str, Any]:
    return figure(units, stat, resamples=1000, seed=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=Path, required=True, help="training rows (benchmarks/fits/relevance_rows.py)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--cache", type=Path, default=None, help="feature cache folder")
    ap.add_argument("--out", type=Path, default=Path(".cache/heads"), help="where the head folder is written")
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    from logitjudge.judge import Judge

    t0 = time.monotonic()
    defn = default_registry().get("chunk_relevance@2")
    defn = defn.model_copy(update={"head": HeadDef(name="chunk_relevance", fallback="2")})
    judge = Judge.load(args.model, heads="none")
    engine = judge.engine
    layers = default_layers(engine.runner.n_layers)
    train = head_examples(defn, read_rows(args.rows))
    feats = extract(engine, train, layers=layers, cache=args.cache)
    described = engine.describe()
    result = fit_head(defn, train, feats, described)
    folder = write_head(result, args.out, data=[f"{args.rows.name}: squad_relevance by paragraph"])
    head = result.head
    cols = [layers.index(x) for x in head.layers]
    import torch

    def probs(rows: list[dict[str, Any]]) -> tuple[list[Any], np.ndarray, np.ndarray]:
        ex = head_examples(defn, rows)
        f = extract(engine, ex, layers=layers, cache=args.cache)
        p = head.probabilities(torch.tensor(f.states[:, cols].reshape(len(ex), -1))).numpy()[:, 0]
        return ex, p, f.label_probs[:, 0]

    hotpot = [json.loads(x) for x in (DATA / "hotpotqa_relevance" / "dev.jsonl").read_text().splitlines()]
    ex, p, zero = probs(hotpot)
    units: dict[str, list[tuple[bool, float, float]]] = {}  # per question: (gold, head P, label readout P)
    for e, pi, zi in zip(ex, p, zero):
        units.setdefault(e.key.split("#")[0], []).append((e.label == "true", float(pi), float(zi)))
    logit = {k: [np.log(x[1] / (1 - x[1] + 1e-9) + 1e-9) for x in u] for k, u in units.items()}
    centred = {k: [(x[0], float(v - np.mean(logit[k]))) for x, v in zip(u, logit[k])] for k, u in units.items()}
    hp = list(units.values())
    record: dict[str, Any] = {
        "metadata": run_metadata(device=str(described.get("device", "cpu"))),
        "engine": {k: described.get(k) for k in ("model", "precision", "dtype", "fingerprint")},
        "head": {
            "folder": str(folder),
            "layers": list(head.layers),
            "c": result.c,
            "layer_choice": result.layer_choice,
        },
        "squad_held_out": {k: result.held_out.get(k) for k in ("rows", "accuracy", "accuracy_interval", "auroc")},
        "squad_held_out_zero_shot_auroc": result.held_out.get("zero_shot", {}).get("auroc"),
        "hotpotqa": {
            "questions": len(hp),
            "chunks": len(ex),
            "head_auroc": _figure([[(g, s) for g, s, _ in u] for u in hp], _auroc),
            "head_centred_auroc": _figure(list(centred.values()), _auroc),
            "zero_shot_auroc": _figure([[(g, z) for g, _, z in u] for u in hp], _auroc),
            "head_accuracy_at_0.5": float(
                accuracy_score([x[0] for u in hp for x in u], [x[1] >= 0.5 for u in hp for x in u])
            ),
            "head_share_called_relevant": float(np.mean([x[1] >= 0.5 for u in hp for x in u])),
        },
    }
    novel = [json.loads(x) for x in (DATA / "noveleval" / "dev.jsonl").read_text().splitlines()]
    as_rows = [{**r, "gold": {"per_chunk": [g > 0 for g in r["gold"]["per_chunk_grade"]]}} for r in novel]
    ex, p, _ = probs(as_rows)
    by_q: dict[str, list[float]] = {}
    for e, pi in zip(ex, p):
        by_q.setdefault(e.key.split("#")[0], []).append(float(pi))
    grades = [r["gold"]["per_chunk_grade"] for r in novel]
    scored = [(g, by_q[str(r["id"])]) for g, r in zip(grades, novel)]

    def ndcg(us: list[Any], order: bool = False) -> float:
        return float(np.mean([ndcg_score([g], [[-i for i in range(len(g))] if order else s], k=10) for g, s in us]))

    record["noveleval"] = {
        "queries": len(scored),
        "head_ndcg_at_10": _figure(scored, ndcg),
        "retrieval_order_ndcg_at_10": _figure(scored, lambda us: ndcg(us, True)),
    }
    record["seconds"] = round(time.monotonic() - t0, 1)
    model = str(record["engine"]["model"])
    print(write_result(args.out_dir, f"relevance-head-{model}", record, markdown(record)).read_text(encoding="utf-8"))
    return 0


def _cell(fig: dict[str, Any]) -> str:
    ci = fig.get("ci")
    return f"{fig['value']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def markdown(r: dict[str, Any]) -> str:
    m, h, n, s = r["metadata"], r["hotpotqa"], r["noveleval"], r["squad_held_out"]
    return (
        "\n".join(
            [
                f"# A trained head for chunk_relevance's question ({r['engine']['model']})",
                "",
                f"commit {m.get('git_sha')}, {m.get('date')}, {m.get('device')} ({r['engine'].get('precision')}); "
                f"`python benchmarks/studies/relevance_head.py`; {r['seconds']} s",
                "",
                f"Head: layers {r['head']['layers']}, C={r['head']['c']}, trained on SQuAD paragraphs "
                f"(`squad_relevance`); its held-out SQuAD articles: {s['rows']} examples, accuracy "
                f"{s['accuracy']:.3f}, AUROC {s['auroc']:.3f} (the question's label readout: "
                f"{r['squad_held_out_zero_shot_auroc']:.3f}).",
                "",
                "| set | readout | figure [95% CI] |",
                "|---|---|---|",
                f"| HotpotQA dev ({h['questions']} questions, {h['chunks']} chunks) | head P(relevant) | "
                f"AUROC {_cell(h['head_auroc'])}; accuracy at 0.5 {h['head_accuracy_at_0.5']:.3f}, "
                f"called relevant {h['head_share_called_relevant']:.2f} |",
                f"| | head, centred per question | AUROC {_cell(h['head_centred_auroc'])} |",
                f"| | label readout of the same question | AUROC {_cell(h['zero_shot_auroc'])} |",
                f"| NovelEval dev ({n['queries']} queries) | head P(relevant) | nDCG@10 {_cell(n['head_ndcg_at_10'])} |",
                f"| | retrieval order | nDCG@10 {_cell(n['retrieval_order_ndcg_at_10'])} |",
                "",
                "For comparison, `chunk_relevance@2` (its combine fitted on these HotpotQA dev questions): "
                "5-fold grouped CV AUROC 0.870 on all 29, 0.883 on 8 of them; NovelEval nDCG@10 0.811 "
                "(`docs/benchmarks/quality.md`).",
            ]
        )
        + "\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
