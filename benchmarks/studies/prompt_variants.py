"""Faithfulness wordings, with and without the content-free contrast, on the same items.

    python benchmarks/studies/prompt_variants.py [--model M] [--sets halueval_qa,qags] [--limit 100] [--seed 0]

For every row of the faithfulness dev sets (the quality benchmark's stratified sample,
:func:`quality.select_rows`), each wording below is asked as a noul question over the item's
state and over the state without ``context`` (all wordings share the state in one request), and
scored two ways: P(yes) with context, and the contrast ``sigmoid(logit p - logit p0)``
(:func:`logitjudge.rubrics.scoring.contrast_probability`). AUROC against the gold label, with a
95% bootstrap interval over source items (:func:`logitjudge.rubrics.samples.bootstrap_interval`),
beside the length baseline in its better direction. ``base`` is the catalogue's wording.

Writes ``benchmarks/results/prompt-variants-<model>.{json,md}`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quality"))  # quality.py
from quality import DATA, RESULTS, hardware, select_rows  # noqa: E402

from logitjudge import Judge  # noqa: E402
from logitjudge.engine.types import EngineRequest, Option, Question  # noqa: E402
from logitjudge.rubrics.aggregate import gold_of  # noqa: E402
from logitjudge.rubrics.api import to_item  # noqa: E402
from logitjudge.rubrics.registry import default_registry  # noqa: E402
from logitjudge.rubrics.samples import auroc, bootstrap_interval, item_group, length_baseline_auroc  # noqa: E402
from logitjudge.rubrics.scoring import contrast_probability  # noqa: E402

_FAITH = default_registry().get("faithfulness")
_CRIT = _FAITH.criteria
WORDINGS: dict[str, tuple[str, tuple[str | None, str | None]]] = {
    "base": (_FAITH.template or "", (_CRIT.true if _CRIT else None, _CRIT.false if _CRIT else None)),
    "correct_answer": ("According to `context`, `output` is a correct answer to `input`.", (None, None)),
    "contradiction": ("`output` states something that `context` does not say or contradicts.", (None, None)),
    "plain_question": ("Is `output` fully supported by `context`?", (None, None)),
}
"""name -> (instructions, (criteria if yes, criteria if no)). ``contradiction`` is asked the other
way round: its P(yes) is a P(not faithful), so its score is 1 - P(yes)."""


def _questions() -> tuple[Question, ...]:
    return tuple(Question("noul", ins, (Option("true", t), Option("false", f))) for ins, (t, f) in WORDINGS.values())


def run(judge: Judge, name: str, limit: int | None, seed: int, resamples: int) -> dict:
    rows = [json.loads(x) for x in (DATA / name / "dev.jsonl").read_text().splitlines() if x.strip()]
    rows = select_rows([r for r in rows if r.get("evaluator") == "faithfulness"], limit, seed)
    requests, golds, lengths, groups = [], [], [], []
    for r in rows:
        item = to_item(r)
        state = item.state()
        requests.append(EngineRequest(state=state, questions=_questions()))
        requests.append(EngineRequest(state={k: v for k, v in state.items() if k != "context"}, questions=_questions()))
        golds.append(bool(gold_of(r).passed["faithfulness"]))
        lengths.append(float(len(item.output or "")))
        groups.append(item_group(str(r["id"])))
    t0 = time.perf_counter()
    results = []
    for i in range(0, len(requests), 8):
        results += judge.answer_many(requests[i : i + 8])
    seconds = time.perf_counter() - t0
    y, g = np.asarray(golds), np.asarray(groups)
    out: dict = {"set": name, "n": len(rows), "seconds": round(seconds, 1), "variants": {}}
    base_len = length_baseline_auroc(golds, lengths)
    out["length_baseline"] = {"value": base_len[0], "direction": base_len[1]} if base_len else None
    for k, key in enumerate(WORDINGS):
        with_ctx = np.array([results[2 * j].answers[k].probabilities[0] for j in range(len(rows))])
        without = np.array([results[2 * j + 1].answers[k].probabilities[0] for j in range(len(rows))])
        contrast = np.array([contrast_probability(a, b) for a, b in zip(with_ctx, without)])
        sign = -1.0 if key == "contradiction" else 1.0
        figs = {}
        for label, score in (("p_yes", sign * with_ctx), ("contrast", sign * contrast)):
            value = auroc(y, score)
            ci = bootstrap_interval(lambda idx, s=score: auroc(y[idx], s[idx]), g, resamples=resamples, seed=seed)
            lo, hi = (ci["lo"], ci["hi"]) if ci else (float("nan"), float("nan"))
            figs[label] = {"auroc": value, "lo": lo, "hi": hi}
        figs["mean_p_yes"] = float(with_ctx.mean())
        out["variants"][key] = figs
    return out


def markdown(record: dict) -> str:
    lines = [
        f"Model `{record['engine']['model']}` ({record['engine'].get('dtype')}), {record['hardware'].get('cpu', '')}; "
        f"--limit {record['limit']} --seed {record['seed']}. AUROC of the faithfulness score against gold, "
        "95% bootstrap interval over source items. `p_yes`: P(yes) over the whole state; `contrast`: "
        "sigmoid(logit P(yes) - logit P(yes | state without context)).",
        "",
        "| set | n | wording | AUROC p_yes | AUROC contrast | mean P(yes) | length baseline |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for s in record["sets"]:
        lb = s["length_baseline"]
        for key, f in s["variants"].items():
            p, c = f["p_yes"], f["contrast"]
            lines.append(
                f"| {s['set']} | {s['n']} | {key} | {p['auroc']:.3f} [{p['lo']:.2f}, {p['hi']:.2f}] | "
                f"{c['auroc']:.3f} [{c['lo']:.2f}, {c['hi']:.2f}] | {f['mean_p_yes']:.2f} | "
                f"{lb['value']:.3f} {lb['direction']} |"
                if lb
                else f"| {s['set']} | {s['n']} | {key} | {p['auroc']:.3f} | {c['auroc']:.3f} | {f['mean_p_yes']:.2f} | – |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--sets", default="halueval_qa")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    judge = Judge.load(args.model)
    engine = judge.describe()
    record = {
        "command": " ".join(sys.argv),
        "limit": args.limit,
        "seed": args.seed,
        "engine": engine,
        "hardware": hardware(engine),
        "wordings": {k: v[0] for k, v in WORDINGS.items()},
        "sets": [run(judge, s, args.limit, args.seed, args.resamples) for s in args.sets.split(",")],
    }
    stem = f"prompt-variants-{engine['model']}"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{stem}.json").write_text(json.dumps(record, indent=1, default=str))
    md = markdown(record)
    (args.out_dir / f"{stem}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
