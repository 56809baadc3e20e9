"""Read rows: what a forward hands to the readout (:class:`Reads`), and the helpers that lay a
request's question views out as rows after its prefix and renumber their labels.

Used by :mod:`logitjudge.engine.runner`; the one piece that touches the model is
:func:`counting_tokens` (forward hooks that count tokens, for progress bars).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from logitjudge.engine.pack import LabelTerm, RequestPlan

__all__ = [
    "Reads",
    "branch_groups",
    "counting_tokens",
    "groups_tag",
    "one_row",
    "relabel",
    "row_adapters",
    "rows_of",
    "shift_labels",
]


@dataclass
class Reads:
    """Hidden states at read positions and the labels that use them.

    Attributes:
        hidden: (R, H * (1 + K)) per read position: the final hidden state (after the model's
            last norm), then the states of the runner's K tapped layers in ``taps`` order; model
            dtype. ``hidden[:, :H]`` is what the LM head reads.
        labels: every label of every question view; ``terms`` index rows of ``hidden``.
        tokens_run: tokens that went through the model (the sum over requests of ``n_tokens``,
            or more for ``separate``, which re-runs the prefix per question).
        paths: one entry per forward group: ``packed:dense``, ``packed:flex``,
            ``packed>prefix_rows`` (too long for a dense mask), ``prefix_packed:dense``,
            ``prefix_packed>prefix_rows``, ``prefix_rows``, ``separate``.
    """

    hidden: torch.Tensor
    labels: list[LabelTerm]
    tokens_run: int
    paths: list[str]


def one_row(plan: RequestPlan) -> bool:
    """True when ``plan`` is one question read in one row: one view, every label one token."""
    return (
        len(plan.questions) == 1
        and len(plan.questions[0].views) == 1
        and all(len(lab) == 1 for lab in plan.questions[0].views[0].labels)
    )


def groups_tag(groups: list[list[int]]) -> str:
    return f"x{len(groups)}" if len(groups) > 1 else ""


def shift_labels(labels: list[LabelTerm], by: int) -> list[LabelTerm]:
    return [LabelTerm(t.request, t.question, t.view, t.option, [(r + by, tok) for r, tok in t.terms]) for t in labels]


def relabel(labels: list[LabelTerm], requests: list[int], by: int) -> list[LabelTerm]:
    """Labels of a sub-run over ``requests`` (numbered 0..n-1 there), renumbered and shifted by ``by``."""
    return [
        LabelTerm(requests[t.request], t.question, t.view, t.option, [(r + by, tok) for r, tok in t.terms])
        for t in labels
    ]


def rows_of(plan: RequestPlan, request: int) -> tuple[list[tuple[tuple[int, ...], list[int]]], list[LabelTerm]]:
    """One token row per view (per label when labels span several tokens), after the prefix.

    Returns the rows as ``(tokens, read offsets within the row)`` and the labels, whose read
    indices count reads over all rows in order.
    """
    rows: list[tuple[tuple[int, ...], list[int]]] = []
    labels: list[LabelTerm] = []
    n_reads = 0
    for qi, q in enumerate(plan.questions):
        for vi, view in enumerate(q.views):
            last = len(view.branch) - 1
            if all(len(lab) == 1 for lab in view.labels):
                rows.append((view.branch, [last]))
                labels += [
                    LabelTerm(request, qi, vi, opt, [(n_reads, lab[0])])
                    for lab, opt in zip(view.labels, view.option_index)
                ]
                n_reads += 1
                continue
            for lab, opt in zip(view.labels, view.option_index):
                offsets = [last + k for k in range(len(lab))]
                rows.append((view.branch + lab[:-1], offsets))
                labels.append(LabelTerm(request, qi, vi, opt, [(n_reads + k, lab[k]) for k in range(len(lab))]))
                n_reads += len(lab)
    return rows, labels


def row_adapters(plan: RequestPlan) -> list[int]:
    """The adapter slot of each row of :func:`rows_of` (same order; -1: none)."""
    out: list[int] = []
    for q in plan.questions:
        for view in q.views:
            out += [q.adapter] * (1 if all(len(lab) == 1 for lab in view.labels) else len(view.labels))
    return out


@contextmanager
def counting_tokens(decoder: Any, callback: Callable[[int], None]) -> Iterator[None]:
    """While open, ``callback(tokens)`` as each forward pass moves through ``decoder``.

    Hooks on the decoder layers report, after each layer, its share in whole tokens of its
    input's slots (batch x length, padding included): a forward over ``T`` slots adds ``T``,
    in one step per layer (one per forward without a ``layers`` list). A prefix taken from
    the state cache runs no forward, so it adds nothing.
    """
    layers = list(getattr(decoder, "layers", None) or [decoder])
    n = len(layers)

    def hook_for(i: int) -> Callable[..., None]:
        def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], _out: Any) -> None:
            hidden = args[0] if args else kwargs.get("hidden_states", kwargs.get("input_ids"))
            shape: tuple[int, ...] = tuple(getattr(hidden, "shape", ()))
            if len(shape) >= 2:
                slots = int(shape[0]) * int(shape[1])
                callback(slots * (i + 1) // n - slots * i // n)

        return hook

    handles = [layer.register_forward_hook(hook_for(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def branch_groups(plan: RequestPlan, limit: int, cap: int) -> list[list[int]] | None:
    """Questions of ``plan`` in consecutive groups whose mask after the prefix, (Lg, S + Lg) for
    Lg branch tokens, has at most ``limit`` cells (the runner's ``dense_mask_max_tokens ** 2``:
    64 MiB in fp32 at the default 4096); ``None`` when one question alone is over it.

    A group also holds at most ``cap`` branch tokens (the runner's ``group_tokens``; a larger
    question alone makes its own group): masked attention computes every (Lg x Lg) pair though a
    branch sees only itself, so k groups cost Lb*S + Lb^2/k scores instead of Lb*S + Lb^2; each
    extra group costs one forward call."""
    S = len(plan.prefix)
    groups: list[list[int]] = []
    width = 0
    for q in range(len(plan.questions)):
        n = plan.branch_tokens(q)
        if n * (S + n) > limit:
            return None
        if groups and (width + n) * (S + width + n) <= limit and width + n <= cap:
            groups[-1].append(q)
            width += n
        else:
            groups.append([q])
            width = n
    return groups
