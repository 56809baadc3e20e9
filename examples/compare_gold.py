"""Print the judge's answers beside the gold labels of a shipped example.

Usage: python examples/compare_gold.py REQUEST.json GOLD.json  (runs `logitjudge ask` itself)
"""

from __future__ import annotations

import json
import sys

from logitjudge import Judge


def main(request_path: str, gold_path: str) -> None:
    request = json.load(open(request_path, encoding="utf-8"))
    gold = json.load(open(gold_path, encoding="utf-8"))
    answers = Judge.load().ask(request)["answers"]
    right = 0
    print(f"{'question':<18} {'type':<7} {'answer':<22} {'gold':<12} ok")
    for qid, a in answers.items():
        if a["type"] == "noul":
            shown, ok = f"p(yes)={a['noul']:.2f}", (a["noul"] >= 0.5) == gold[qid]
        elif a["type"] == "choice":
            shown, ok = f"{a['choice']} ({a['probabilities'][a['choice']]:.2f})", a["choice"] == gold[qid]
        else:
            shown, ok = f"score={a['score']:.2f}", round(a["score"]) == gold[qid]
        right += ok
        print(f"{qid:<18} {a['type']:<7} {shown:<22} {str(gold[qid]):<12} {'yes' if ok else 'no'}")
    print(f"{right}/{len(answers)} agree with the gold labels")


if __name__ == "__main__":
    main(*sys.argv[1:3])
