"""Trained decision heads: a question read from hidden states by a small learned map.

A question with a head is answered, in the same packed pass, from the hidden states at its
answer position (the last token of its branch: where its label token would be predicted, the
token before the ecosystem's ``<|mark|>``) instead of from its label logits::

    x = [h_l1 ; h_l2 ; ...]                      (D = K * H) the tapped layers, fp32
    a_0 = x,  a_i = relu(W_i a_(i-1) + b_i)      hidden layers (none for a linear head)
    z = W_proj a_last + b_proj                   (C,) one score per option
    p = softmax(z)                               fp64 values, summing to 1

Layer ``l`` (1..N for an N-layer model) is the residual stream after decoder layer ``l``
(transformers' ``hidden_states[l]``); ``l = N`` is the final hidden state after the model's last
norm, the one the LM head reads. A head adds no tokens: the packed pass already computes every
tapped state, the runner only keeps the rows at answer positions. Since each question's state
at its answer position is the same packed or alone (the packing's contract), so is its head's
answer (``tests/engine/test_heads.py``).

**Files** (one folder per head), in the ecosystem's decision-head layout: ``head.safetensors``
(``proj.weight`` (C, D), ``proj.bias`` (C,), and for an MLP ``hidden.<i>.weight`` /
``hidden.<i>.bias`` in order; fp32, any input standardisation folded in) beside a
``decision.json`` whose ``x_logitjudge_head`` key is ours (transformers' ``DecisionConfig``
ignores keys it does not know)::

    {"x_logitjudge_head": {"format": 1, "name": "chunk_support", "question_type": "choice",
      "options": ["supports", "contradicts", "unrelated"], "layers": [20, 24],
      "model": "...", "fingerprint": "<sha256 of the weights>", "prompt_version": "lj-prompt-1.1",
      "evaluator": "chunk_support@4", "trained": {...}, "metrics": {...}}}

A head is bound to the weights and prompt it was trained on, like a calibration: loading it on
another engine raises :class:`~logitjudge.errors.HeadMismatchError` naming each differing key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from logitjudge.engine.formulas import softmax
from logitjudge.engine.question_types import QUESTION_TYPES
from logitjudge.engine.types import Question
from logitjudge.errors import HeadMismatchError, InvalidRequestError

HEAD_WEIGHTS = "head.safetensors"
HEAD_CONFIG = "decision.json"
HEAD_KEY = "x_logitjudge_head"
HEAD_FORMAT = 1
BOUND_KEYS = ("fingerprint", "prompt_version")
"""What a head must match on the engine (:meth:`Head.check`); ``model`` is reported, not matched
(a renamed copy of the same weights keeps its fingerprint)."""


@dataclass(frozen=True)
class Head:
    """A trained readout for one kind of question.

    Attributes:
        name: the name questions refer to it by (``Question.head``), e.g. ``"chunk_support"``.
        question_type: the type of question it reads (``noul``, ``choice`` or ``score``).
        options: its output classes, by option name (a noul's ``"true"``/``"false"``); a
            question it reads must have exactly these options, in any order.
        layers: the tapped layers whose states are concatenated, in order (see module doc).
        weights: ``(W, b)`` per linear map, fp32: hidden layers first, ``proj`` last;
            ``W_i`` is (out, in), the first ``in`` is ``len(layers) * hidden_size``.
        binding: ``model``, ``fingerprint``, ``prompt_version`` of the engine it was trained on.
        meta: the rest of its ``x_logitjudge_head`` block (training data, metrics, evaluator).
    """

    name: str
    question_type: str
    options: tuple[str, ...]
    layers: tuple[int, ...]
    weights: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    binding: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        spec = QUESTION_TYPES.get(self.question_type)
        if spec is None or spec.likelihood:
            readable = [n for n, t in QUESTION_TYPES.items() if not t.likelihood]
            raise ValueError(
                f"a head reads a question over options ({', '.join(readable)}): not {self.question_type!r}"
            )
        if not self.weights:
            raise ValueError("a head needs at least its proj layer")
        if self.weights[-1][0].shape[0] != len(self.options):
            raise ValueError(f"proj has {self.weights[-1][0].shape[0]} rows for {len(self.options)} options")
        if not self.layers:
            raise ValueError("a head reads at least one layer")

    @property
    def in_features(self) -> int:
        """D, the length of the concatenated states it reads."""
        return int(self.weights[0][0].shape[1])

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        """Option probabilities from tapped states.

        Args:
            x: (R, D) the concatenated states of ``layers`` at R answer positions (any float dtype;
                computed in fp32).

        Returns:
            (R, C) fp64, rows summing to 1, columns in :attr:`options` order.

        Raises:
            ValueError: ``x`` has another width than the head reads.
        """
        if x.shape[-1] != self.in_features:
            raise ValueError(f"head {self.name!r} reads {self.in_features} features, got {x.shape[-1]}")
        a = x.float()
        for w, b in self.weights[:-1]:
            a = torch.relu(a @ w.to(a.device).T + b.to(a.device))
        w, b = self.weights[-1]
        z = a @ w.to(a.device).T + b.to(a.device)  # (R, C)
        return softmax(z.double(), dim=-1).cpu()

    def check(self, describe: Mapping[str, Any]) -> None:
        """Refuse an engine other than the one this head was trained on.

        Args:
            describe: the engine's ``describe()`` (``fingerprint``, ``prompt_version``).

        Raises:
            HeadMismatchError: a :data:`BOUND_KEYS` value differs (each named, with both values).
        """
        mismatch = {
            k: (self.binding.get(k), describe.get(k)) for k in BOUND_KEYS if self.binding.get(k) != describe.get(k)
        }
        if mismatch:
            said = ", ".join(f"{k}: head {a!r} vs engine {b!r}" for k, (a, b) in mismatch.items())
            raise HeadMismatchError(
                f"head {self.name!r} was trained for {self.binding.get('model')!r}, not this engine ({said}); "
                "train one for this model with `logitjudge fit`",
                mismatch=mismatch,
            )

    def config(self) -> dict[str, Any]:
        """The ``decision.json`` content (see module doc)."""
        block = {
            "format": HEAD_FORMAT,
            "name": self.name,
            "question_type": self.question_type,
            "options": list(self.options),
            "layers": list(self.layers),
            "hidden_layers": len(self.weights) - 1,
            "activation": "relu",
            **dict(self.binding),
            **dict(self.meta),
        }
        return {HEAD_KEY: block}

    def save(self, folder: str | Path) -> Path:
        """Write ``head.safetensors`` and ``decision.json`` into ``folder`` (created); return it."""
        from safetensors.torch import save_file

        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        tensors: dict[str, torch.Tensor] = {}
        for i, (w, b) in enumerate(self.weights[:-1]):
            tensors[f"hidden.{i}.weight"], tensors[f"hidden.{i}.bias"] = w.float().contiguous(), b.float().contiguous()
        w, b = self.weights[-1]
        tensors["proj.weight"], tensors["proj.bias"] = w.float().contiguous(), b.float().contiguous()
        save_file(tensors, str(path / HEAD_WEIGHTS))
        (path / HEAD_CONFIG).write_text(json.dumps(self.config(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> Head:
        """Read a head folder (see module doc).

        Raises:
            HeadMismatchError: a missing or unreadable file, an unknown format, or weights that do
                not fit the config (the message names the file).
        """
        from safetensors.torch import load_file

        path = Path(folder)
        try:
            block = json.loads((path / HEAD_CONFIG).read_text(encoding="utf-8"))[HEAD_KEY]
            tensors = load_file(str(path / HEAD_WEIGHTS))
        except (OSError, ValueError, KeyError) as exc:
            raise HeadMismatchError(f"{path}: not a logitjudge head folder ({exc})") from exc
        if block.get("format") != HEAD_FORMAT:
            raise HeadMismatchError(f"{path / HEAD_CONFIG}: unknown head format {block.get('format')!r}")
        n_hidden = int(block.get("hidden_layers", 0))
        try:
            weights = [(tensors[f"hidden.{i}.weight"], tensors[f"hidden.{i}.bias"]) for i in range(n_hidden)]
            weights.append((tensors["proj.weight"], tensors["proj.bias"]))
        except KeyError as exc:
            raise HeadMismatchError(f"{path / HEAD_WEIGHTS}: missing tensor {exc}") from exc
        reserved = {"format", "name", "question_type", "options", "layers", "hidden_layers", "activation"}
        binding = {k: block.get(k) for k in ("model", *BOUND_KEYS)}
        meta = {k: v for k, v in block.items() if k not in reserved and k not in binding}
        try:
            return cls(
                name=str(block["name"]),
                question_type=str(block["question_type"]),
                options=tuple(block["options"]),
                layers=tuple(int(x) for x in block["layers"]),
                weights=tuple((w.float(), b.float()) for w, b in weights),
                binding=binding,
                meta=meta,
            )
        except (KeyError, ValueError) as exc:
            raise HeadMismatchError(f"{path / HEAD_CONFIG}: {exc}") from exc


SHIPPED = "shipped"
NONE = "none"


def shipped_dir() -> Path:
    """Where the package's heads live: ``logitjudge/heads/<model>/<head>/``."""
    return Path(__file__).resolve().parent.parent / "heads"


def shipped_for(describe: Mapping[str, Any]) -> dict[str, Head]:
    """The package's heads trained for this very engine (fingerprint and prompt version), by name;
    heads made for other engines are skipped, not refused."""
    root = shipped_dir()
    if not root.is_dir():
        return {}
    out: dict[str, Head] = {}
    for config in sorted(root.glob(f"*/*/{HEAD_CONFIG}")):
        head = Head.load(config.parent)
        if all(head.binding.get(k) == describe.get(k) for k in BOUND_KEYS):
            out[head.name] = head
    return out


def resolve_heads(spec: str | Sequence[str | Path] | None, describe: Mapping[str, Any]) -> dict[str, Head]:
    """The heads a ``--heads`` / ``Judge.load(heads=...)`` value names: ``"shipped"`` (the
    package's heads for this engine, if any), ``"none"`` / ``None`` (no heads), or head folders
    (each a head, or a folder of heads; a string may list several, comma-separated), which are
    checked against the engine (:meth:`Head.check`). Folders win over shipped heads of the same
    name only when named.

    Raises:
        HeadMismatchError: a named folder holds no head, or a head made for another engine.
    """
    if spec is None or spec == NONE:
        return {}
    if spec == SHIPPED:
        return shipped_for(describe)
    folders = [p for p in spec.split(",") if p] if isinstance(spec, str) else list(spec)
    heads = load_heads(folders)
    for head in heads.values():
        head.check(describe)
    return heads


def load_heads(folders: Sequence[str | Path]) -> dict[str, Head]:
    """Heads by name from head folders, or from parents of head folders (every subfolder holding a
    ``decision.json`` with our key).

    Raises:
        HeadMismatchError: a folder holds no head, or two heads share a name.
    """
    heads: dict[str, Head] = {}
    for folder in folders:
        path = Path(folder)
        found = [path] if (path / HEAD_CONFIG).is_file() else sorted(p.parent for p in path.glob(f"*/{HEAD_CONFIG}"))
        if not found:
            raise HeadMismatchError(f"{path}: no head ({HEAD_CONFIG} + {HEAD_WEIGHTS}) in it or its subfolders")
        for p in found:
            head = Head.load(p)
            if head.name in heads:
                raise HeadMismatchError(f"two heads named {head.name!r} ({p})")
            heads[head.name] = head
    return heads


def check_head(heads: Mapping[str, Head], q: Question, i: int) -> None:
    """A question that names a head: the head is loaded, reads this type and these options."""
    where = ("questions", i, "head")
    head = heads.get(q.head or "")
    if head is None:
        raise InvalidRequestError(
            f"questions[{i}].head: no head {q.head!r} loaded (loaded: {sorted(heads) or 'none'})", field=where
        )
    names = sorted(str(o.name) for o in q.options)
    if q.type != head.question_type or names != sorted(head.options):
        raise InvalidRequestError(
            f"questions[{i}].head: head {q.head!r} reads a {head.question_type} with options "
            f"{list(head.options)}, not a {q.type} with {names}",
            field=where,
        )
    if q.rotations != 1:
        raise InvalidRequestError(f"questions[{i}].head: a question read by a head takes no rotations", field=where)
