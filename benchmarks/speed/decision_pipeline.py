"""logitjudge against transformers' ``pipeline("decision")``: same weights, same requests, one run.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed/decision_pipeline.py --threads 2 \
        --shapes 266x1,266x6,2000x16 --repeats 3

transformers (>= 5.24) answers a System One request by the next-token logits of each option's
label, one prompt and one full forward pass per question. Three contenders answer the same wire
requests (the question mix of ``benchmarks/speed/speed.py``: noul, choice of 4, score of 4 in
turn; ``266x1`` is one noul question), on one loaded copy of the weights, timed interleaved round
robin (pipeline, same-prompt, default, pipeline, ...) so the noise of this shared machine falls on
each alike:

- ``pipeline``: ``pipeline("decision", model=..., tokenizer=...)`` with its generic prompt (the
  question as the user turn of the model's chat template, lettered options);
- ``same_prompt``: logitjudge serving the pipeline's own prompt, written out as a
  ``decision_template.jinja`` (the chat template around the pipeline's ``DECISION_PROMPT``),
  one order per question (``rotations=1``): the same prompts, so the probabilities must equal the
  pipeline's (the largest difference is printed); what is left is packing: the state run once,
  each question only its own branch, all in one forward pass;
- ``default``: logitjudge as ``logitjudge serve`` answers, its own prompt and every cyclic
  rotation of a choice's or score's options (more tokens than one order, order-invariant answers).

Both logitjudge contenders go through :meth:`logitjudge.judge.Judge.ask` (validation, planning,
forward, readout, the wire answer) with the state cache emptied before each run (a state never
seen); the pipeline through its ``__call__``. Wall seconds: median (and minimum) of ``--repeats``
runs after one warm-up; tokens: those run through the model per request. Ratios are the
pipeline's median over ours. Prints a table and writes
``benchmarks/results/decision-pipeline-<model>-<device>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from speed import questions, round_robin_times, state_of

from logitjudge.engine.core import Engine
from logitjudge.engine.decision import DecisionPromptBuilder
from logitjudge.engine.model import LoadedModel
from logitjudge.engine.types import Question
from logitjudge.judge import Judge

sys.path.append(str(Path(__file__).resolve().parents[1]))  # benchmarks/: the result helper
from _results import RESULTS, run_metadata  # noqa: E402

CONTENDERS = ("pipeline", "same_prompt", "default")


def pipeline_template(tokenizer: Any) -> str:
    """A ``decision_template.jinja`` that renders exactly the pipeline's generic prompt.

    The pipeline renders ``DECISION_PROMPT`` and gives the text to the model's chat template as
    the user turn (generation prompt added); a template reads ``state`` and ``question`` itself,
    so the chat template's text around the user turn is written out literally (``{% raw %}``).
    """
    from transformers.decision.template_utils import DECISION_PROMPT

    slot = "\x00SLOT\x00"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": slot}], tokenize=False, add_generation_prompt=True
    )
    head, tail = text.split(slot)
    return "{% raw %}" + head + "{% endraw %}" + DECISION_PROMPT.strip("\n") + "{% raw %}" + tail + "{% endraw %}"


def wire(state: str, qs: tuple[Question, ...]) -> dict[str, Any]:
    """The System One request of ``questions(n)`` over ``state`` (options and levels in order)."""
    out: dict[str, Any] = {}
    for i, q in enumerate(qs):
        if q.type == "noul":
            out[f"q{i}"] = {"type": "noul", "instructions": q.instructions}
        elif q.type == "choice":
            out[f"q{i}"] = {
                "type": "choice",
                "instructions": q.instructions,
                "criteria": {o.name: None for o in q.options},
            }
        else:
            out[f"q{i}"] = {
                "type": "score",
                "instructions": q.instructions,
                "criteria": [o.description for o in q.options],
            }
    return {"state": state, "questions": out}


def probabilities(answers: dict[str, Any]) -> dict[str, list[float]]:
    """Each answer's probabilities in option order (noul: P(true)), for the parity check."""
    out = {}
    for name, a in answers.items():
        out[name] = [a["noul"]] if a["type"] == "noul" else list(a["probabilities"].values())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--shapes", default="266x1,266x6,2000x16", help="state tokens x questions, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from transformers import pipeline
    from transformers.decision import DecisionConfig

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    base = Engine.load(args.model, device="cpu", dtype="float32", max_row_tokens=1 << 20)
    lm = base.lm
    default = Judge(base)  # the served default: own prompt, cyclic rotations
    workdir = Path(tempfile.mkdtemp(prefix="decision-template-"))
    (workdir / "decision_template.jinja").write_text(pipeline_template(lm.tokenizer), encoding="utf-8")
    same_lm = LoadedModel(lm.model, lm.tokenizer, lm.name, str(workdir), lm.device, lm.dtype, lm.fingerprint)
    same_engine = Engine(same_lm, base.config)
    assert isinstance(same_engine.prompt, DecisionPromptBuilder)
    same = Judge(same_engine, default_rotations=1)
    decide = pipeline("decision", model=lm.model, tokenizer=lm.tokenizer, decision_config=DecisionConfig())

    def pipeline_tokens(request: dict[str, Any]) -> int:
        return sum(int(inputs["input_ids"].shape[-1]) for inputs, _ in decide.preprocess(request)["prompts"])

    rows = []
    for shape in args.shapes.split(","):
        n_state, n_q = (int(x) for x in shape.split("x"))
        request = wire(state_of(base, n_state), questions(n_q))
        theirs = decide(json.loads(json.dumps(request)))
        mine = same.ask({"model": same.model_name, **request})
        p_theirs, p_mine = probabilities(theirs), probabilities(mine["answers"])
        parity = max(abs(a - b) for k in p_theirs for a, b in zip(p_theirs[k], p_mine[k], strict=True))
        tokens = {
            "pipeline": pipeline_tokens(request),
            "same_prompt": mine["usage"]["input_tokens"],
            "default": default.ask({"model": default.model_name, **request})["usage"]["input_tokens"],
        }

        def ours(judge: Judge, engine: Engine, request: dict[str, Any] = request) -> None:
            engine.state_cache.clear()  # a state never seen
            judge.ask({"model": judge.model_name, **request})

        fns = {
            "pipeline": lambda request=request: decide(request),
            "same_prompt": lambda: ours(same, same_engine),
            "default": lambda: ours(default, base),
        }
        times = round_robin_times(fns, {k: args.repeats for k in fns})
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {
            "shape": shape,
            "state_tokens": n_state,
            "questions": n_q,
            "max_abs_diff_same_prompt_vs_pipeline": parity,
            "tokens": tokens,
            "median_s": med,
            "min_s": {k: min(v) for k, v in times.items()},
            "speedup_vs_pipeline": {k: med["pipeline"] / med[k] for k in ("same_prompt", "default")},
        }
        rows.append(row)
        print(
            f"{shape:>9}  pipeline {med['pipeline']:7.2f}s {tokens['pipeline']:6d} tok | "
            f"same prompt {med['same_prompt']:6.2f}s {tokens['same_prompt']:6d} tok x{row['speedup_vs_pipeline']['same_prompt']:.2f} | "
            f"default {med['default']:6.2f}s {tokens['default']:6d} tok x{row['speedup_vs_pipeline']['default']:.2f} | "
            f"parity {parity:.1e}",
            flush=True,
        )
    record = {
        "command": " ".join(sys.argv),
        "model": base.name,
        "config": {"shapes": args.shapes, "repeats": args.repeats, "threads": torch.get_num_threads()},
        "rows": rows,
        "metadata": run_metadata(device="cpu"),
    }
    stem = f"decision-pipeline-{base.name.split('/')[-1].lower()}-cpu"
    out = Path(args.out) if args.out else RESULTS / f"{stem}.json"
    out.write_text(json.dumps(record, indent=2) + "\n")
    md = [
        f'# logitjudge vs `pipeline("decision")`: {base.name}, CPU, {torch.get_num_threads()} threads',
        "",
        f"{record['metadata'].get('date', '')} · commit {record['metadata'].get('git_sha', '')} · "
        f"transformers {record['metadata'].get('transformers', '')} · median of {args.repeats} interleaved runs",
        "",
        "| state tok x questions | pipeline s (tokens) | same prompt s (tokens) | speed-up | default s (tokens) | speed-up | same-prompt max abs diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m, t, s = r["median_s"], r["tokens"], r["speedup_vs_pipeline"]
        md.append(
            f"| {r['state_tokens']} x {r['questions']} | {m['pipeline']:.2f} ({t['pipeline']}) | "
            f"{m['same_prompt']:.2f} ({t['same_prompt']}) | {s['same_prompt']:.2f}x | "
            f"{m['default']:.2f} ({t['default']}) | {s['default']:.2f}x | {r['max_abs_diff_same_prompt_vs_pipeline']:.1e} |"
        )
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("wrote", out, "and", out.with_suffix(".md"))


if __name__ == "__main__":
    main()
