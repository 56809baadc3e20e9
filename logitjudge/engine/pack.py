"""Packing: the state prefix once, each question a branch that sees the prefix and itself only.

A request becomes a tree of token segments: the prefix is the root; each question view is a
child of the prefix; a multi-token label adds a child of its view holding the label's first
tokens (so the next token of each can be read). A question asked in several views (its options
rotated) runs the tokens its views begin with once, as a stem segment whose children are the
views' remainders: the same tokens in the same positions, so the same answers, fewer tokens.
A token attends to every token of its ancestor segments and causally to its own segment, and
its position id continues from its parent's end::

    tokens    [state prefix 0..S-1][question 1: S..S+q1-1][question 2: S..S+q2-1] ...
    positions  0 ....... S-1        S ....... S+q1-1        S ....... S+q2-1

so each question sees exactly what it would see alone. Several requests can share one row: each
is its own tree (a root restarts positions at 0) and never sees the others.

Every label's log-probability is a sum over its tokens of ``log p(token | read position)``; the
:class:`ReadPlan` lists, per label, which read position and token each term uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import torch

from logitjudge.engine.types import QuestionType, View


@dataclass(frozen=True)
class QuestionPlan:
    """A question's type and views (one, or several rotations); ``calibrated``: whether the
    engine's calibration may scale its answer (:attr:`~logitjudge.engine.types.Question.calibrated`)."""

    type: QuestionType
    views: tuple[View, ...]
    n_options: int
    calibrated: bool = True
    temperature: float = 1.0
    """Divides each view's label log-probabilities before their softmax (a decision model's
    ``decision.json`` temperature; 1 = none)."""
    head: str | None = None
    """The trained head that reads this question (:attr:`~logitjudge.engine.types.Question.head`)."""
    option_names: tuple[str, ...] = ()
    """The options' names in request order (a head's classes are matched to them by name)."""
    adapter: int = -1
    """The slot of the branch adapter its tokens run (:mod:`logitjudge.engine.adapters`); -1: none."""

    @cached_property
    def stem(self) -> int:
        """Tokens every view's branch begins with, run once for all views (0 for one view).

        The longest common token prefix of the branches, less one token so that each view keeps
        a segment of its own to read its labels from. For a rotated choice it is the question
        line and the options header (``Question: ...`` / ``Options:``): 16 tokens for the speed
        benchmark's four-option choice, 25 for its four-level score, on SmolLM2's tokenizer."""
        if len(self.views) < 2:
            return 0
        first = self.views[0].branch
        limit = min(len(v.branch) for v in self.views) - 1
        k = 0
        while k < limit and all(v.branch[k] == first[k] for v in self.views[1:]):
            k += 1
        return k


@dataclass(frozen=True)
class RequestPlan:
    """A tokenized request: the prefix ids and one plan per question (request order)."""

    prefix: tuple[int, ...]
    questions: tuple[QuestionPlan, ...]

    @property
    def n_tokens(self) -> int:
        """Tokens this request runs: prefix once, every branch (a rotated question's stem once) and
        label continuation."""
        return len(self.prefix) + sum(self.branch_tokens(i) for i in range(len(self.questions)))

    def branch_tokens(self, question: int) -> int:
        """Tokens of question ``question``'s branches and label continuations (prefix excluded;
        a shared stem counted once)."""
        q = self.questions[question]
        return sum(len(v.branch) - q.stem + sum(len(lab) - 1 for lab in v.labels) for v in q.views) + q.stem


@dataclass
class Segment:
    """A run of tokens in the tree; ``parent`` indexes the same list, -1 for a root."""

    tokens: tuple[int, ...]
    parent: int
    start_pos: int
    adapter: int = -1
    """The adapter slot its tokens run (-1: the base weights; a prefix is always -1)."""


@dataclass
class LabelTerm:
    """One label of one view: its terms ``(read index, token id)`` and the option it denotes."""

    request: int
    question: int
    view: int
    option: int
    terms: list[tuple[int, int]]


@dataclass
class Tree:
    """Segments of one or more requests, and the labels to score.

    Attributes:
        segments: all segments, parents before children.
        reads: per read index, ``(segment, offset)`` of the token whose next-token logits are read.
        labels: every label to score.
    """

    segments: list[Segment] = field(default_factory=list)
    reads: list[tuple[int, int]] = field(default_factory=list)
    labels: list[LabelTerm] = field(default_factory=list)

    def add(self, tokens: tuple[int, ...], parent: int, adapter: int = -1) -> int:
        start = 0 if parent < 0 else self.segments[parent].start_pos + len(self.segments[parent].tokens)
        self.segments.append(Segment(tokens, parent, start, adapter))
        return len(self.segments) - 1

    def read(self, segment: int, offset: int) -> int:
        self.reads.append((segment, offset))
        return len(self.reads) - 1


def add_request(
    tree: Tree,
    plan: RequestPlan,
    request_index: int,
    *,
    with_prefix: bool = True,
    questions: Sequence[int] | None = None,
) -> None:
    """Add one request's segments and labels to ``tree``.

    With ``with_prefix=False`` the prefix is not added (it lives in a KV cache); the branches (a
    rotated question's stem) then become roots whose positions start at ``len(plan.prefix)``.
    ``questions`` adds only those question indices (in the given order; labels keep the request's question numbers).
    """
    root = tree.add(plan.prefix, -1) if with_prefix else -1
    for qi in range(len(plan.questions)) if questions is None else questions:
        q = plan.questions[qi]
        parent, k = root, q.stem
        if k:  # the views' common first tokens, once
            parent = tree.add(q.views[0].branch[:k], root, q.adapter)
            if root < 0:
                tree.segments[parent].start_pos = len(plan.prefix)
        for vi, view in enumerate(q.views):
            seg = tree.add(view.branch[k:], parent, q.adapter)
            if parent < 0:
                tree.segments[seg].start_pos = len(plan.prefix)
            last = tree.read(seg, len(view.branch) - k - 1)
            for label, option in zip(view.labels, view.option_index):
                terms = [(last, label[0])]
                if len(label) > 1:
                    cont = tree.add(label[:-1], seg, q.adapter)
                    terms += [(tree.read(cont, i), label[i + 1]) for i in range(len(label) - 1)]
                tree.labels.append(LabelTerm(request_index, qi, vi, option, terms))


@dataclass
class PackedRow:
    """A tree laid out as one row of tokens.

    Attributes:
        input_ids: (L,) token ids.
        position_ids: (L,) position ids (restarting after each prefix).
        segment_ids: (L,) the segment of each token.
        ancestors: (n_seg, n_seg) bool, ``[s, t]`` true when t is s or an ancestor of s.
        read_index: (R,) row index of each read position, in read order.
        adapter_ids: (L,) the adapter slot each token runs (-1: base weights).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    ancestors: torch.Tensor
    read_index: torch.Tensor
    adapter_ids: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))


def lay_out(tree: Tree) -> PackedRow:
    """Flatten a tree into one row (segments in order)."""
    ids: list[int] = []
    pos: list[int] = []
    seg_ids: list[int] = []
    adapters: list[int] = []
    offsets: list[int] = []
    for s, seg in enumerate(tree.segments):
        offsets.append(len(ids))
        ids += seg.tokens
        adapters += [seg.adapter] * len(seg.tokens)
        pos += range(seg.start_pos, seg.start_pos + len(seg.tokens))
        seg_ids += [s] * len(seg.tokens)
    n = len(tree.segments)
    anc = torch.eye(n, dtype=torch.bool)
    for s, seg in enumerate(tree.segments):
        if seg.parent >= 0:
            anc[s] |= anc[seg.parent]  # parents come first, so their row is complete
    reads = [offsets[s] + off for s, off in tree.reads]
    return PackedRow(
        input_ids=torch.tensor(ids, dtype=torch.long),
        position_ids=torch.tensor(pos, dtype=torch.long),
        segment_ids=torch.tensor(seg_ids, dtype=torch.long),
        ancestors=anc,
        read_index=torch.tensor(reads, dtype=torch.long),
        adapter_ids=torch.tensor(adapters, dtype=torch.long),
    )


def allowed_matrix(row: PackedRow, *, window: int | None = None) -> torch.Tensor:
    """(L, L) bool: may token i attend to token j (ancestor segment, or same segment and j <= i).

    ``window``: a sliding-window layer's span in positions; j is then also within ``window``
    positions of i (``pos_i - pos_j < window``), as in a plain causal pass.
    """
    return allowed_rows(row, 0, row.segment_ids.numel(), window=window)


def allowed_rows(row: PackedRow, start: int, stop: int, *, window: int | None = None) -> torch.Tensor:
    """(stop - start, L) bool: rows ``start..stop-1`` of :func:`allowed_matrix`, built alone.

    FlexAttention's block mask classifies its tiles a few rows at a time with this, so no
    L x L tensor is ever made. Tensors are used on the device they are on.
    """
    seg = row.segment_ids  # (L,)
    idx = torch.arange(seg.numel(), device=seg.device)  # (L,)
    q_seg, q_idx = seg[start:stop], idx[start:stop]  # (Q,)
    same = q_seg[:, None] == seg[None, :]  # (Q, L)
    allowed = row.ancestors[q_seg][:, seg] & (~same | (idx[None, :] <= q_idx[:, None]))
    if window is not None:
        allowed &= (row.position_ids[start:stop, None] - row.position_ids[None, :]) < window
    return allowed


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, Lq, Lk) additive float mask from (Lq, Lk) (B = 1) or (B, Lq, Lk) bool matrices:
    0 where allowed, ``finfo(dtype).min`` elsewhere.

    An additive float mask, never a boolean one: transformers' eager attention reads a boolean
    4D mask as additive (True -> +1), silently attending everywhere (measured here: logits off
    by 15.9 with a bool mask on the eager path, 0.0 with this one).
    """
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None] if mask.dim() == 3 else mask[None, None]


def padded_allowed(rows: list[PackedRow], width: int, *, window: int | None = None) -> torch.Tensor:
    """(B, W, W) bool: each row's :func:`allowed_matrix`, right-padded to ``width``.

    A padding token attends to itself only, so no row of the mask is fully masked (a fully
    masked row gives NaN in some attention kernels); real tokens never attend to padding.
    """
    out = torch.eye(width, dtype=torch.bool).repeat(len(rows), 1, 1)  # (B, W, W)
    for b, row in enumerate(rows):
        n = row.input_ids.numel()
        out[b, :n, :n] = allowed_matrix(row, window=window)
    return out
