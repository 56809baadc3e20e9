"""A trained head for answer_relevancy's page question: does it transfer to WikiEval?

::

    python benchmarks/fits/answer_relevancy_rows.py --out rows.jsonl [--rows-version 1]
    logitjudge fit rows.jsonl --evaluator answer_relevancy@1 --label-key level --balance-classes --out heads/
    python benchmarks/studies/answer_relevancy_head.py --heads heads/answer_relevancy [--heads other/answer_relevancy]

``answer_relevancy@1`` is the page's score question over the item (input and output); a head
trained on its question with ``--label-key level`` reads it (a head on your own labels, see
docs/guides/heads.md). The rows are derived from SQuAD by ``benchmarks/fits/answer_relevancy_rows.py``
(nothing from WikiEval). Side by side in one process, on the same rows:

- ``label readout``: version 1 as shipped (its label tokens, no head);
- each ``--heads`` folder: the same question read by that head.

Figures: WikiEval pairwise accuracy (the good answer's score above the poor one's; ties 1/2)
over all 50 pairs and over the 38 pairs outside version 2's fit (version 2's own figure on those
38 is ``benchmarks/results/rag-quality-qwen2.5-coder-1.5b-instruct-ar-all-heldout.md``, not rerun
here: 35 s per item), with 95% bootstrap intervals over pairs (``rag_quality.pair_figures``); the
share of good and poor answers at each most probable level; the page's example (its padded
answer, the answer alone, a reply of pleasantries); and twelve replies written before any head
was run on them (three questions: a direct answer, the answer padded with the subject's other
facts, an on-topic reply that does not answer, an off-topic reply), checked as: direct passes,
the others fail, direct > padded > misses. Writes
``benchmarks/results/answer-relevancy-head-<model>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _results, quality/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quality"))
from _results import RESULTS, run_metadata, write_result  # noqa: E402
from rag_quality import load_rows, pair_figures  # noqa: E402

EVALUATOR = "answer_relevancy@1"
NODE = "What is the minimum Node version for the SDK?"
PAGE = {
    "padded": "Node 20 or newer. As background, the SDK ships ESM and CommonJS builds, includes TypeScript "
    "declarations, and many teams also use pnpm.",
    "direct": "Node 20 or newer.",
    "pleasantries": "Great question! Thanks for reaching out, we love hearing from you. Have a wonderful day!",
}
CASES = {
    "What is the capital of Australia?": {
        "direct": "Canberra is the capital of Australia.",
        "padded": "Canberra is the capital of Australia. Australia is also home to kangaroos, and its largest "
        "city, Sydney, has a famous opera house on its harbour.",
        "misses": "Kangaroos are marsupials found across Australia, and many tourists visit its beaches.",
        "off": "The weather in Paris is mild in spring, and the city's cafés are busy.",
    },
    "How many bits are in a byte?": {
        "direct": "A byte has eight bits.",
        "padded": "A byte has eight bits. Computers were once the size of rooms, and early programmers used "
        "punched cards. Today many people own a laptop and a phone.",
        "misses": "Bits and bytes measure data, and storage keeps getting cheaper every year.",
        "off": "The Nile is the longest river in Africa.",
    },
    "When did the Berlin Wall fall?": {
        "direct": "It fell on 9 November 1989.",
        "padded": "It fell on 9 November 1989. Berlin is the capital of Germany and has many museums. The "
        "city's zoo is one of the oldest in the country.",
        "misses": "The Berlin Wall divided the city and was guarded along its whole length.",
        "off": "Basil grows best in warm soil with plenty of sun.",
    },
}


def _levels(result: Any) -> list[float]:
    return [float(result.probabilities[str(k)]) for k in range(4)]


def readout(judge: Any, wikieval: list[dict[str, Any]], heldout: set[str], resamples: int) -> dict[str, Any]:
    """Every figure of the module docstring for the engine's current heads."""
    items = [{"input": r["input"], "output": r["output"]} for r in wikieval]
    results = [r.results["answer_relevancy"] for r in judge.evaluate(items, [EVALUATOR]).results]
    failed = [r["id"] for r, res in zip(wikieval, results) if res.status != "ok"]
    if failed:
        raise SystemExit(f"{len(failed)} WikiEval rows were not answered: {failed[:5]}")
    recs = [{"result": res.model_dump(mode="json", exclude_none=True)} for res in results]
    inside = [k for k, r in enumerate(wikieval) if r["gold"]["pair"] in heldout]
    by_level = {}
    for good in (True, False):
        top = [
            int(np.argmax(_levels(res))) for r, res in zip(wikieval, results) if r["gold"]["preferred_in_pair"] is good
        ]
        by_level["good" if good else "poor"] = [round(top.count(k) / len(top), 3) for k in range(4)]
    page = judge.evaluate([{"input": NODE, "output": o} for o in PAGE.values()], [EVALUATOR]).results
    page_out = {}
    for name, r in zip(PAGE, page):
        res = r.results["answer_relevancy"]
        levels = _levels(res)
        page_out[name] = {
            "expected_level": round(sum(k * p for k, p in enumerate(levels)), 3),
            "most_probable": int(np.argmax(levels)),
            "passed": res.passed,
        }
    flat = [(q, n, o) for q, outs in CASES.items() for n, o in outs.items()]
    got = judge.evaluate([{"input": q, "output": o} for q, _, o in flat], [EVALUATOR]).results
    scores = {(q, n): r.results["answer_relevancy"] for (q, n, _), r in zip(flat, got)}
    cases = {}
    for q, outs in CASES.items():
        s = {n: scores[(q, n)] for n in outs}
        cases[q] = {
            "scores": {n: round(s[n].score, 3) for n in outs},
            "most_probable": {n: int(np.argmax(_levels(s[n]))) for n in outs},
            "passed": {n: s[n].passed for n in outs},
            "holds": bool(
                s["direct"].passed
                and not any(s[n].passed for n in ("padded", "misses", "off"))
                and s["direct"].score > s["padded"].score > s["misses"].score
            ),
        }
    return {
        "engine": judge.describe(),
        "wikieval_all": pair_figures(wikieval, recs, resamples, 0),
        "wikieval_outside_v2_fit": pair_figures([wikieval[k] for k in inside], [recs[k] for k in inside], resamples, 0),
        "most_probable_level_share": by_level,
        "page": page_out,
        "cases": cases,
        "cases_holding": sum(c["holds"] for c in cases.values()),
    }


def markdown(record: dict[str, Any]) -> str:
    meta = record["metadata"]
    names = list(record["readouts"])

    def fig(f: dict[str, Any]) -> str:
        ci = f.get("ci")
        return f"{f['value']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + f" (n={f.get('n')})"

    lines = [
        f"# A trained head for answer_relevancy's page question: {record['model']}",
        "",
        f"`{record['command']}`; {meta.get('date')}, commit {meta.get('git_sha', '?')}"
        f"{' (uncommitted changes)' if meta.get('git_dirty') else ''}, {meta.get('device')} "
        f"({meta.get('device_name')}), precision {record['engine'].get('precision')}.",
        "",
        "| readout | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    rd = record["readouts"]
    rows = [
        ("WikiEval pairwise, all pairs", lambda r: fig(r["wikieval_all"]["pairwise_accuracy"])),
        ("WikiEval pairwise, pairs outside v2's fit", lambda r: fig(r["wikieval_outside_v2_fit"]["pairwise_accuracy"])),
        ("longer answer wins (all pairs)", lambda r: fig(r["wikieval_all"]["baseline_longer_wins"])),
        (
            "good answers: share at level 0/1/2/3",
            lambda r: " / ".join(f"{x:.2f}" for x in r["most_probable_level_share"]["good"]),
        ),
        (
            "poor answers: share at level 0/1/2/3",
            lambda r: " / ".join(f"{x:.2f}" for x in r["most_probable_level_share"]["poor"]),
        ),
    ]
    rows += [
        (
            f"page: {name} (E[level], most probable, passed)",
            lambda r, name=name: (
                f"{r['page'][name]['expected_level']:.2f}, {r['page'][name]['most_probable']}, {r['page'][name]['passed']}"
            ),
        )
        for name in PAGE
    ]
    rows.append(("blind cases holding (of 3 questions)", lambda r: str(r["cases_holding"])))
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(rd[n]) for n in names) + " |")
    lines += ["", "Heads (their held-out figures on the derived rows, from `report.json`):", ""]
    for name, info in record["heads"].items():
        lines.append(f"- `{name}`: {info}")
    lines += ["", "Blind cases, scores per reply (direct / padded / misses / off):", ""]
    for n in names:
        for q, c in rd[n]["cases"].items():
            s = c["scores"]
            top = c["most_probable"]
            lines.append(
                f"- {n}, {q} {s['direct']:.2f} / {s['padded']:.2f} / {s['misses']:.2f} / {s['off']:.2f}"
                f" (most probable levels {top['direct']} / {top['padded']} / {top['misses']} / {top['off']})"
                f"{'' if c['holds'] else ', does not hold'}"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=Path, action="append", required=True, help="a head folder from logitjudge fit")
    ap.add_argument("--model", default=None)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    from logitjudge import Judge
    from logitjudge.engine.heads import load_heads

    wikieval = load_rows("wikieval", None, 0)
    fitted = json.loads((RESULTS / "rag-fit-rows.json").read_text(encoding="utf-8"))["ids"]["wikieval"]
    heldout = {r["gold"]["pair"] for r in wikieval if r["id"] not in set(fitted)}
    judge = Judge.load(args.model, heads="none")
    record: dict[str, Any] = {
        "command": "python benchmarks/studies/answer_relevancy_head.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": judge.model_name,
        "engine": judge.describe(),
        "metadata": run_metadata(device=str(judge.describe().get("device", "cpu"))),
        "readouts": {},
        "heads": {},
    }
    record["readouts"]["label readout"] = readout(judge, wikieval, heldout, args.resamples)
    for folder in args.heads:
        heads = load_heads([folder])
        name = f"head {folder}"
        (head,) = heads.values()
        trained, held = head.meta.get("trained", {}), head.meta.get("held_out", {})
        record["heads"][name] = (
            f"{trained.get('rows')} training examples, layer {trained.get('layer_choice')}, C {trained.get('c')}, "
            f"held-out accuracy {held.get('accuracy', float('nan')):.3f} ({held.get('rows')} examples)"
        )
        judge.engine.set_heads(heads)
        try:
            record["readouts"][name] = readout(judge, wikieval, heldout, args.resamples)
        finally:
            judge.engine.set_heads(None)
        print(f"{name}: done", flush=True)
    stem = f"answer-relevancy-head-{judge.model_name.split('/')[-1].lower()}"
    md = write_result(args.out_dir, stem, record, markdown(record))
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
