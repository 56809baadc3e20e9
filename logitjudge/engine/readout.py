"""Readout: hidden states at answer positions -> label log-probabilities (fp32) -> probabilities.

This is the one place where option probabilities are computed.

For each read position r, with final hidden state h_r (after the model's last norm):
    logit(r, t) = transform(h_r · W_t + b_t)            W: the LM head, b its bias if any
    log p(t | r) = logit(r, t) - logsumexp_v logit(r, v) (over the whole vocabulary)
A label's score is the sum of ``log p`` over its tokens (one term for single-token labels). A
view's distribution is ``softmax`` over its own labels' scores, so the probability mass is
renormalised onto exactly the question's options (for single-token labels this equals a softmax
over the label logits). Rotated views are averaged per option. ``option_mass`` is the mass the
model put on the labels before renormalising (sum of ``exp(score)``), averaged over views.

Label logits are computed in fp32 from fp32 copies of only the label rows of W; the full-vocab
log-sum-exp (needed for multi-token labels and for ``option_mass``) uses the model's dtype for
the matmul and fp32 for the reduction. ``transform`` reproduces the model's own final logit
processing: Gemma 2's soft-capping, Cohere's ``logit_scale``, Granite's ``logits_scaling``.

**Calibration** is part of this stage: where the engine's :class:`~logitjudge.engine.calibration.Calibration`
(handed to :attr:`Readout.calibration` by ``Engine.set_calibration``) has a scaling for a
question's bucket, its final distribution ``p`` (views averaged) becomes
``softmax(log max(p, 1e-9) / T + b)`` (:func:`~logitjudge.engine.formulas.scale`; the formula's
source and the fitting are in :mod:`logitjudge.engine.calibration`). Every answer field derives
from that one distribution.

The formulas themselves (softmax, log-sum-exp, the scaling) live in :mod:`logitjudge.engine.formulas`,
which the calibration imports too, so "where do the final option probabilities come from" has one
answer, this module and its formulas (``tests/engine/test_one_place.py`` fails on another
implementation elsewhere). ``readout.softmax``, ``readout.logsumexp`` and ``readout.scale`` are
those functions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from logitjudge.engine.formulas import logsumexp, scale, softmax
from logitjudge.engine.pack import LabelTerm, RequestPlan

if TYPE_CHECKING:
    from logitjudge.engine.calibration import Calibration, Scaling
    from logitjudge.engine.heads import Head
    from logitjudge.engine.interop import DecisionHead

_LSE_CHUNK = 256  # rows of (rows, vocab) logits at a time: 256 x 152k x 4 B = 156 MB at most


def logit_transform(config: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """The model's final logit processing, applied to fp32 logits (identity for most models)."""
    cap = getattr(config, "final_logit_softcapping", None)
    scale = getattr(config, "logit_scale", None)
    divide = getattr(config, "logits_scaling", None)

    def transform(x: torch.Tensor) -> torch.Tensor:
        if scale is not None:
            x = x * scale
        if divide is not None:
            x = x / divide
        if cap is not None:
            x = torch.tanh(x / cap) * cap
        return x

    return transform


@dataclass(frozen=True)
class Distribution:
    """One question's final distribution, as the readout hands it to the engine.

    Attributes:
        probabilities: one per option, request order, summing to 1 (fp64 values; calibrated
            where a scaling applies).
        option_mass: the raw probability mass of the labels (full-vocabulary softmax, mean over
            views), before calibration; in [0, 1].
        log_mass: the mean over views of ``logsumexp`` of the labels' log-probabilities (fp64,
            nats): ``log P(text)`` for a continuation's one label, finite where ``exp`` would
            underflow.
    """

    probabilities: list[float]
    option_mass: float
    log_mass: float


class Readout:
    """Projects read positions onto the LM head.

    Args:
        model: the ``*ForCausalLM`` whose output embeddings are the LM head; ``None`` for a
            backend that scores labels itself (vLLM): then only :meth:`final_distributions`
            (the softmax over labels, view averaging and calibration) runs here.
    """

    def __init__(self, model: Any | None) -> None:
        head = model.get_output_embeddings() if model is not None else None
        self.weight = head.weight if head is not None else None  # (V, H), model dtype
        self.bias = getattr(head, "bias", None)
        self.transform = logit_transform(model.config if model is not None else None)
        self.calibration: Calibration | None = None
        """Applied by :meth:`final_distributions` (set by ``Engine.set_calibration``; ``None`` = raw)."""
        self.heads: dict[str, Head] = {}
        """Trained heads by name (set by ``Engine.set_heads``), read by :meth:`head_distributions`."""
        self.taps: tuple[int, ...] = ()
        """The layers the runner taps, in the order their states follow the final one in a read row."""
        self.decision_head: DecisionHead | None = None
        """A checkpoint's own decision head (:mod:`logitjudge.engine.interop`, set by the engine from
        its prompt builder): it scores every label in place of the LM head (:meth:`log_probs`)."""

    def log_probs(self, hidden: torch.Tensor, labels: list[LabelTerm]) -> torch.Tensor:
        """Score of every label: sum over its tokens of log p(token | read position).

        Args:
            hidden: (R, H) final hidden states at read positions, or (R, H * (1 + K)) with tapped
                layers after them (only the first H columns are read here).
            labels: the labels, whose terms index ``hidden`` rows.

        Returns:
            (N_labels,) fp32 log-probabilities, in ``labels`` order.

        With a :attr:`decision_head`, a label's token is the head's slot for its option and its
        score the head's log-probability (:meth:`~logitjudge.engine.interop.DecisionHead.log_probs`).

        Raises:
            RuntimeError: this readout has no LM head (``Readout(None)``).
        """
        if self.decision_head is not None:
            return self.decision_head.log_probs(hidden, labels)
        if self.weight is None:
            raise RuntimeError("this readout has no LM head: its backend scores labels itself")
        h = hidden[:, : self.weight.shape[1]].to(self.weight.device)
        lse = torch.cat(
            [logsumexp(self._full_logits(h[i : i + _LSE_CHUNK]), -1) for i in range(0, h.shape[0], _LSE_CHUNK)]
        )  # (R,)
        reads = torch.tensor([r for t in labels for r, _ in t.terms], device=h.device)
        toks = torch.tensor([tok for t in labels for _, tok in t.terms], device=h.device)
        w = self.weight[toks].float()  # (T, H) only the label rows, fp32
        logit = (h[reads].float() * w).sum(-1)  # (T,)
        if self.bias is not None:
            logit = logit + self.bias[toks].float()
        term = self.transform(logit) - lse[reads]  # (T,) log p(token | read)
        owner = torch.tensor([k for k, t in enumerate(labels) for _ in t.terms], device=h.device)
        return torch.zeros(len(labels), device=h.device).index_add_(0, owner, term)  # (N_labels,)

    def final_distributions(
        self, scores: torch.Tensor, labels: list[LabelTerm], plans: Sequence[RequestPlan]
    ) -> dict[tuple[int, int], Distribution]:
        """Every question's final distribution: :func:`distributions`, calibrated by
        :attr:`calibration` where it has a scaling for the question's bucket.

        Args:
            scores: (N_labels,) label log-probabilities from :meth:`log_probs`.
            labels: the labels, same order.
            plans: the planned requests the labels belong to (``LabelTerm.request`` indexes them).

        Returns:
            ``{(request, question): Distribution}``.
        """
        n_options = {(r, q): qp.n_options for r, p in enumerate(plans) for q, qp in enumerate(p.questions)}
        scalings: dict[tuple[int, int], Scaling] = {}
        if self.calibration is not None:
            for r, p in enumerate(plans):
                for q, qp in enumerate(p.questions):
                    if not qp.calibrated:
                        continue
                    scaling = self.calibration.scaling_for(qp.type, qp.n_options)
                    if scaling is not None:
                        scalings[(r, q)] = scaling
        temperatures = {
            (r, q): qp.temperature
            for r, p in enumerate(plans)
            for q, qp in enumerate(p.questions)
            if qp.temperature != 1.0
        }
        return distributions(scores, labels, n_options, scalings, temperatures)

    def head_distributions(
        self, tapped: torch.Tensor | None, labels: list[LabelTerm], plans: Sequence[RequestPlan]
    ) -> dict[tuple[int, int], list[float]]:
        """The head answer of every question read by a trained head.

        Args:
            tapped: (R, K * H) the tapped layers' states per read position, in :attr:`taps`
                order (``Reads.hidden[:, H:]``); ``None`` when no layer is tapped.
            labels: the labels; a question's answer position is the first read of its first
                view (the branch's last token: where every label of that view is read from).
            plans: the planned requests.

        Returns:
            ``{(request, question): probabilities}`` in the question's option order, for the
            questions with a head (each head sees only its own layers' columns).

        Raises:
            RuntimeError: a question names a head this readout does not hold.
        """
        wanted = {(r, q): qp.head for r, p in enumerate(plans) for q, qp in enumerate(p.questions) if qp.head}
        if not wanted:
            return {}
        if tapped is None:
            raise RuntimeError("questions with heads but no tapped layers")
        read_at: dict[tuple[int, int], int] = {}
        for t in labels:
            if t.view == 0 and (t.request, t.question) in wanted:
                read_at.setdefault((t.request, t.question), t.terms[0][0])
        width = tapped.shape[1] // max(1, len(self.taps))
        by_head: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for key, name in wanted.items():
            by_head[name].append(key)
        out: dict[tuple[int, int], list[float]] = {}
        for name, keys in by_head.items():
            head = self.heads.get(name)
            if head is None:
                raise RuntimeError(f"no head {name!r} loaded")
            cols = torch.cat(
                [torch.arange(self.taps.index(lay) * width, (self.taps.index(lay) + 1) * width) for lay in head.layers]
            )
            rows = torch.tensor([read_at[k] for k in keys])
            x = tapped[rows.to(tapped.device)][:, cols.to(tapped.device)]  # (n, D)
            probs = head.probabilities(x)  # (n, C) in head.options order
            for (r, q), row in zip(keys, probs):
                names = plans[r].questions[q].option_names
                out[(r, q)] = [float(row[head.options.index(o)]) for o in names]
        return out

    def _full_logits(self, h: torch.Tensor) -> torch.Tensor:
        assert self.weight is not None, "log_probs checks it"
        logits = (h @ self.weight.T).float()  # (r, V)
        if self.bias is not None:
            logits = logits + self.bias.float()
        return self.transform(logits)


def distributions(
    scores: torch.Tensor,
    labels: list[LabelTerm],
    n_options: dict[tuple[int, int], int],
    scalings: Mapping[tuple[int, int], Scaling] | None = None,
    temperatures: Mapping[tuple[int, int], float] | None = None,
) -> dict[tuple[int, int], Distribution]:
    """Per (request, question): the probabilities over its options and the option mass.

    Each view's labels are softmaxed among themselves (fp32), their scores first divided by the
    question's temperature where ``temperatures`` has one; views of one question are averaged
    per option (fp64); a question in ``scalings`` is then calibrated (:func:`scale`).

    Args:
        scores: (N_labels,) label log-probabilities from :meth:`Readout.log_probs`.
        labels: the labels, same order.
        n_options: options per (request, question).
        scalings: the calibration's scaling per (request, question); absent = left as is.
        temperatures: per (request, question), > 0; absent = 1.

    Returns:
        ``{(request, question): Distribution}`` (see :class:`Distribution`: the mass is the raw
        label mass, before calibration).
    """
    views: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for k, t in enumerate(labels):
        views[(t.request, t.question, t.view)].append(k)
    scores = scores.float().cpu()
    acc: dict[tuple[int, int], tuple[torch.Tensor, float, float, int]] = {}
    for (r, q, _v), idx in views.items():
        s = scores[idx]  # (n,)
        temperature = temperatures.get((r, q), 1.0) if temperatures else 1.0
        p = softmax(s / temperature if temperature != 1.0 else s, dim=0)
        probs = torch.zeros(n_options[(r, q)], dtype=torch.float64)
        probs[[labels[k].option for k in idx]] = p.double()
        mass = float(torch.exp(s.double()).sum())
        log_mass = float(logsumexp(s.double(), dim=0))
        if (r, q) in acc:
            tot, m, lm, c = acc[(r, q)]
            acc[(r, q)] = (tot + probs, m + mass, lm + log_mass, c + 1)
        else:
            acc[(r, q)] = (probs, mass, log_mass, 1)
    out = {}
    for key, (tot, m, lm, c) in acc.items():
        final = tot / c  # (n_options,) fp64
        scaling = scalings.get(key) if scalings else None
        if scaling is not None:
            final = scale(final, scaling.temperature, scaling.bias)
        out[key] = Distribution(final.tolist(), m / c, lm / c)
    return out
