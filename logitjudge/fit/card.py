"""A fitted head's folder: the head's files, its card (``CARD.md``: what it reads, what it was
trained on, what it measured) and ``report.json`` (the CV losses, the held-out reports, the timing)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from logitjudge.fit.heads import FitResult


def card(result: FitResult, *, timing: Mapping[str, Any] | None = None, data: Sequence[str] = ()) -> str:
    """The head's card (``CARD.md``): what it reads, what it was trained on, what it measured."""
    head, held = result.head, result.held_out
    trained = dict(head.meta.get("trained", {}))

    def pct(x: Any) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    lines = [
        f"# Head `{head.name}` for {head.binding.get('model')}",
        "",
        f"- evaluator: `{head.meta.get('evaluator')}`; question type `{head.question_type}`, options "
        + ", ".join(f"`{o}`" for o in head.options),
        f"- reads layers {list(head.layers)} at the answer position (the question's last token), "
        f"a linear map (multinomial logistic regression, C={result.c}, standardisation folded in"
        + (", classes weighted to equal priors)" if trained.get("balanced") else ")"),
        f"- bound to fingerprint `{head.binding.get('fingerprint')}` and prompt `{head.binding.get('prompt_version')}`",
        f"- trained on {trained.get('rows')} examples from {', '.join(trained.get('sources', []))}"
        + (f" ({', '.join(data)})" if data else ""),
        f"- chosen by {trained.get('cv_folds')}-fold grouped cross-validation (mean log loss) among "
        + ", ".join(sorted({k.split(" C=")[0] for k in result.cv})),
    ]
    if timing:
        lines.append(
            f"- features: {timing.get('examples_computed')} examples through the model, "
            f"{timing.get('examples_cached')} from the cache, {timing.get('features_s')} s; "
            f"total {timing.get('total_s')} s"
        )
    if held:
        ranked = int("auroc" in held)  # two options: the AUROC of the first option's probability
        lines += [
            "",
            f"## Held out ({held['rows']} examples, groups never seen by the fit)",
            "",
            "| readout | accuracy [95% CI] | macro-F1 | log loss | predicted share |" + (" AUROC [95% CI] |" * ranked),
            "|---|---|---|---|---|" + "---|" * ranked,
        ]
        for name, rep in (("this head", held), ("zero-shot labels", held["zero_shot"]), ("majority", held["majority"])):
            share = ", ".join(f"{o} {pct(v)}" for o, v in rep["predicted_share"].items())
            line = (
                f"| {name} | {pct(rep['accuracy'])}{_ci(rep.get('accuracy_interval'), pct)} | {rep['macro_f1']:.3f} | "
                f"{rep['log_loss']:.3f} | {share} |"
            )
            if ranked:
                area = rep.get("auroc")
                line += (
                    f" {'-' if area is None else f'{area:.3f}'}{_ci(rep.get('auroc_interval'), lambda x: f'{x:.3f}')} |"
                )
            lines.append(line)
        lines.append("")
        lines.append("gold share: " + ", ".join(f"{o} {pct(v)}" for o, v in held["gold_share"].items()))
        lines += ["", "| source | rows | accuracy | macro-F1 |", "|---|---|---|---|"]
        for src, rep in held.get("per_source", {}).items():
            lines.append(f"| {src} | {rep['rows']} | {pct(rep['accuracy'])} | {rep['macro_f1']:.3f} |")
    return "\n".join(lines) + "\n"


def _ci(interval: Sequence[float] | None, fmt: Callable[[float], str]) -> str:
    return f" [{fmt(interval[0])}, {fmt(interval[1])}]" if interval else ""


def write_head(
    result: FitResult, out: str | Path, *, timing: Mapping[str, Any] | None = None, data: Sequence[str] = ()
) -> Path:
    """Write ``<out>/<head name>/``: the head's files, ``CARD.md`` and ``report.json`` (the CV
    losses, the held-out reports and the timing). Returns the head's folder."""
    folder = result.head.save(Path(out) / result.head.name)
    (folder / "CARD.md").write_text(card(result, timing=timing, data=data), encoding="utf-8")
    report = {"cv_log_loss": result.cv, "held_out": result.held_out, "timing": dict(timing or {}), "data": list(data)}
    (folder / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return folder
