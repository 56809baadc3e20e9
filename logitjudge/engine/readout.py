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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from logitjudge.engine.pack import LabelTerm

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


class Readout:
    """Projects read positions onto the LM head.

    Args:
        model: the ``*ForCausalLM`` whose output embeddings are the LM head.
    """

    def __init__(self, model: Any) -> None:
        head = model.get_output_embeddings()
        self.weight = head.weight  # (V, H), model dtype
        self.bias = getattr(head, "bias", None)
        self.transform = logit_transform(model.config)

    def log_probs(self, hidden: torch.Tensor, labels: list[LabelTerm]) -> torch.Tensor:
        """Score of every label: sum over its tokens of log p(token | read position).

        Args:
            hidden: (R, H) hidden states at read positions.
            labels: the labels, whose terms index ``hidden`` rows.

        Returns:
            (N_labels,) fp32 log-probabilities, in ``labels`` order.
        """
        h = hidden.to(self.weight.device)
        lse = torch.cat(
            [self._full_logits(h[i : i + _LSE_CHUNK]).logsumexp(-1) for i in range(0, h.shape[0], _LSE_CHUNK)]
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

    def _full_logits(self, h: torch.Tensor) -> torch.Tensor:
        logits = (h @ self.weight.T).float()  # (r, V)
        if self.bias is not None:
            logits = logits + self.bias.float()
        return self.transform(logits)


def distributions(
    scores: torch.Tensor, labels: list[LabelTerm], n_options: dict[tuple[int, int], int]
) -> dict[tuple[int, int], tuple[list[float], float]]:
    """Per (request, question): the probabilities over its options and the option mass.

    Each view's labels are softmaxed among themselves (fp32); views of one question are
    averaged per option.

    Args:
        scores: (N_labels,) label log-probabilities from :meth:`Readout.log_probs`.
        labels: the labels, same order.
        n_options: options per (request, question).

    Returns:
        ``{(request, question): (probabilities in option order, option_mass)}``.
    """
    views: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for k, t in enumerate(labels):
        views[(t.request, t.question, t.view)].append(k)
    scores = scores.float().cpu()
    acc: dict[tuple[int, int], tuple[torch.Tensor, float, int]] = {}
    for (r, q, _v), idx in views.items():
        s = scores[idx]  # (n,)
        p = torch.softmax(s, dim=0)
        probs = torch.zeros(n_options[(r, q)], dtype=torch.float64)
        probs[[labels[k].option for k in idx]] = p.double()
        mass = float(torch.exp(s.double()).sum())
        if (r, q) in acc:
            tot, m, c = acc[(r, q)]
            acc[(r, q)] = (tot + probs, m + mass, c + 1)
        else:
            acc[(r, q)] = (probs, mass, 1)
    return {key: ((tot / c).tolist(), m / c) for key, (tot, m, c) in acc.items()}
