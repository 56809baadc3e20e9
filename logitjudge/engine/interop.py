"""Ecosystem decision checkpoints: transformers' ``JevForDecision`` heads, answered by this engine.

transformers (>= 5.25) has one decision model with its own head, ``JevForDecision``
(``transformers/models/jev/``): the model of its repo (``self.model``, transformers' base model,
whose ``last_hidden_state`` is the state after the final norm) and one ``proj`` Linear
``(S, H)`` applied at the token before each ``<|mark|>`` of its decision template, or at the
last token of the prompt when the template has no mark (the generic prompt)::

    z = proj(h_final[read])                     (S,) one score per slot (verbaliser)
    z = softcap * tanh(z / softcap)             when the config has a ``softcap``
    s = z[offsets[type] : offsets[type] + n]    the question's n options, in template order
    p = softmax(s / temperature[type])          the decision config's temperature (default 1)

This is the same position this engine reads a question's labels at (the last token of its
branch), and the same state its LM head reads (the runner's final hidden state). So a
checkpoint's head is served as a replacement of the LM head for its questions: option ``k`` of
a view is scored by slot ``offsets[type] + k`` instead of by its label token
(:meth:`DecisionHead.log_probs`), and packing, strategies, the state cache and the parity
self-check are unchanged. Its prompt is the checkpoint's own (``decision_template.jinja``, or
the pipeline's generic prompt in the tokenizer's chat template:
:class:`~logitjudge.engine.decision.DecisionPromptBuilder`).

Two layouts load, as transformers loads them (:func:`read_checkpoint`):

- **a ``JevForDecision`` folder** saved by ``save_pretrained``: ``config.json`` with
  ``model_type: "jev"`` and the base model's ``text_config``, the weights (the base model's
  under ``model.``, the head as ``proj.bias`` and ``weight``, the name transformers' ``jev``
  weight mapping saves ``proj.weight`` under), ``decision.json`` (+ ``decision_template.jinja``).
  The engine loads the base weights as the text config's ``*ForCausalLM``
  (:func:`backbone_config`); an untied LM head is then random, and unused.
- **a base model folder with a head beside its weights**, as ``JevConfig`` reads it:
  ``head.safetensors`` (``proj.weight``, ``proj.bias``) with ``judge_config.json`` and
  ``calibration.json`` (JEV's slots, soft cap and temperatures), or ``readout.safetensors``
  (``weight``, no bias) with ``decision_config.json`` (vLLM deciders' ``codes``). Only for base
  model types that transformers maps to a decision model (``MODEL_FOR_DECISION_MAPPING``: qwen2,
  qwen3_5, gemma4, ...); for others ``pipeline("decision")`` does not read the head either.

Not supported (:class:`~logitjudge.errors.UnsupportedModelError` at load): a LoRA ``adapter``
(JEV's default ``adapter/`` subfolder; merge it into the weights and set
``"adapter_subfolder": null``), non-causal attention (``attention_mode``), and the vLLM backend.

Source: transformers 5.25 ``models/jev/{configuration,modeling}_jev.py``,
``decision/modeling_utils.py``, ``pipelines/decision.py``, ``conversion_mapping.py`` (``jev``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from logitjudge.engine.formulas import logsumexp
from logitjudge.engine.pack import LabelTerm
from logitjudge.errors import InvalidRequestError, UnsupportedModelError

logger = logging.getLogger(__name__)

DECISION_MODEL_TYPES = frozenset({"jev"})
"""``config.json`` model types of transformers' decision models (``JevForDecision``)."""
WEIGHT_KEYS = ("proj.weight", "weight")
BIAS_KEYS = ("proj.bias", "bias")


@dataclass(frozen=True)
class DecisionHead:
    """A checkpoint's decision head (``JevForDecision.proj`` and its config).

    Attributes:
        weight: (S, H) fp32, one row per slot.
        bias: (S,) fp32 (zeros where the file has none, as transformers initialises it).
        offsets: per question type, the slot of its first option.
        softcap: ``softcap * tanh(z / softcap)`` on the scores, or ``None``.
        layout: where it came from (``"JevForDecision"``, ``"head.safetensors"``, ``"readout.safetensors"``).
        digest: sha256 of the weights and the config (part of the prompt version).
    """

    weight: torch.Tensor
    bias: torch.Tensor
    offsets: Mapping[str, int]
    softcap: float | None
    layout: str
    digest: str

    def rows(self, kind: str, n: int) -> tuple[int, ...]:
        """The slots that score the ``n`` options of a ``kind`` question, in template order.

        Raises:
            InvalidRequestError: the head has fewer than ``n`` slots from the type's offset.
        """
        start = int(self.offsets.get(kind, 0))
        if start + n > self.weight.shape[0]:
            raise InvalidRequestError(
                f"this model's decision head scores at most {self.weight.shape[0] - start} options for a {kind} "
                f"question, got {n}",
                field=("questions",),
            )
        return tuple(range(start, start + n))

    def log_probs(self, hidden: torch.Tensor, labels: list[LabelTerm]) -> torch.Tensor:
        """Every label's log-probability under the head, in place of the LM head's.

        Args:
            hidden: (R, H) final hidden states at read positions (tapped layers may follow: only
                the first H columns are read).
            labels: one single-term label per option and view, whose token is the option's slot
                (:meth:`rows`).

        Returns:
            (N_labels,) fp32 ``log softmax`` of the soft-capped scores over each view's own
            options, so a view's labels carry all its mass (``option_mass`` 1).
        """
        width = self.weight.shape[1]
        h = hidden[:, :width]
        weight, bias = self.weight.to(h.device), self.bias.to(h.device)
        reads = torch.tensor([t.terms[0][0] for t in labels], device=h.device)
        slots = torch.tensor([t.terms[0][1] for t in labels], device=h.device)
        z = (h[reads].float() * weight[slots]).sum(-1) + bias[slots]  # (N,)
        if self.softcap is not None:
            z = self.softcap * torch.tanh(z / self.softcap)
        views: dict[tuple[int, int, int], list[int]] = defaultdict(list)
        for k, t in enumerate(labels):
            views[(t.request, t.question, t.view)].append(k)
        out = torch.empty_like(z)
        for idx in views.values():
            at = torch.tensor(idx, device=z.device)
            out[at] = z[at] - logsumexp(z[at], dim=0)
        return out


@dataclass(frozen=True)
class DecisionCheckpoint:
    """A checkpoint's head and its decision settings.

    Attributes:
        head: the head.
        settings: ``decision.json``'s keys as transformers' ``DecisionConfig`` holds them
            (``labels``, ``temperature``, ``noul_options``, ``sanitize_control_tokens``, ``adapter``).
        template: the decision template, or ``None`` for the pipeline's generic prompt.
        where: the file the settings came from (for messages).
    """

    head: DecisionHead
    settings: dict[str, Any]
    template: str | None
    where: Path


def _model_type(directory: Path) -> str | None:
    try:
        return json.loads((directory / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def backbone_config(directory: str | Path) -> Any | None:
    """The base model's config of a ``JevForDecision`` folder (its ``text_config``), so that its
    weights load as that model's ``*ForCausalLM``; ``None`` for any other folder.

    Raises:
        UnsupportedModelError: a decision model whose base model reads without a causal mask.
    """
    path = Path(directory)
    if _model_type(path) not in DECISION_MODEL_TYPES:
        return None
    from transformers import AutoConfig

    text = AutoConfig.from_pretrained(str(path)).text_config
    if getattr(text, "is_causal", True) is False:
        raise UnsupportedModelError(f"{path}: a decision model with non-causal attention is not supported")
    return text


def read_checkpoint(directory: str | Path) -> DecisionCheckpoint | None:
    """The decision head of a model folder in either layout (module docstring), or ``None`` when it
    has none (a plain model, or one with only a decision template).

    Raises:
        UnsupportedModelError: head files transformers would read but this engine cannot honour
            (see the module docstring), or unreadable ones.
    """
    path = Path(directory)
    model_type = _model_type(path)
    if model_type is None:
        return None
    if model_type in DECISION_MODEL_TYPES:
        return _read_saved(path)
    try:
        from transformers import JevConfig
    except ImportError:  # a transformers without decision models reads no head beside the weights either
        return None

    if not any((path / name).is_file() for name in (*JevConfig.extra_config_files, *JevConfig.extra_files)):
        return None
    return _read_beside(path, model_type)


def _read_saved(path: Path) -> DecisionCheckpoint:
    """A ``JevForDecision`` folder saved by ``save_pretrained``."""
    from transformers import AutoConfig

    try:
        from transformers.decision import DecisionConfig
    except ImportError as exc:
        raise UnsupportedModelError(f"{path}: a decision model needs a transformers with decision models") from exc
    try:
        config = AutoConfig.from_pretrained(str(path))
        decision = DecisionConfig.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError) as exc:
        raise UnsupportedModelError(f"{path}: cannot read the decision model's config ({exc})") from exc
    weight, bias = _tensors(_weight_files(path), path)
    head = _head(weight, bias, config, "JevForDecision")
    return _checkpoint(head, decision, path / "decision.json")


def _read_beside(path: Path, model_type: str) -> DecisionCheckpoint | None:
    """A base model folder with a head beside its weights (``JevConfig.extra_files``)."""
    from transformers import JevConfig, JevForDecision
    from transformers.models.auto.modeling_auto import MODEL_FOR_DECISION_MAPPING_NAMES

    if model_type not in MODEL_FOR_DECISION_MAPPING_NAMES:
        logger.warning(
            "%s: decision head files beside a %s model are not used (transformers maps no decision model to %s, "
            "so pipeline('decision') does not read them either)",
            path,
            model_type,
            model_type,
        )
        return None
    try:
        config, decision = JevForDecision.checkpoint_config(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise UnsupportedModelError(f"{path}: cannot read the decision head's config files ({exc})") from exc
    if config is None:
        return None
    vllm = path / "decision_config.json"
    if vllm.is_file() and json.loads(vllm.read_text(encoding="utf-8")).get("attention_mode") not in (None, "causal"):
        raise UnsupportedModelError(f"{vllm}: non-causal attention ('attention_mode') is not supported")
    files = [path / name for name in JevConfig.extra_files if (path / name).is_file()]
    if not files:
        raise UnsupportedModelError(f"{path}: decision head configs without {' or '.join(JevConfig.extra_files)}")
    weight, bias = _tensors(files, path)
    head = _head(weight, bias, config, files[0].name)
    where = next((path / n for n in JevConfig.extra_config_files if (path / n).is_file()), path)
    return _checkpoint(head, decision, where)


def _weight_files(path: Path) -> list[Path]:
    """The safetensors files of a saved model (sharded or not)."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        return [path / n for n in names]
    return [path / "model.safetensors"]


def _tensors(files: list[Path], path: Path) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``proj``'s weight and bias (``None`` if absent) from ``files``, under either name."""
    from safetensors import safe_open

    found: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with safe_open(str(file), "pt") as f:
                for key in (*WEIGHT_KEYS, *BIAS_KEYS):
                    if key in f.keys() and key not in found:
                        found[key] = f.get_tensor(key)
        except OSError as exc:
            raise UnsupportedModelError(f"{file}: cannot read ({exc})") from exc
    weight = next((found[k] for k in WEIGHT_KEYS if k in found), None)
    if weight is None:
        raise UnsupportedModelError(f"{path}: no decision head weight ({' or '.join(WEIGHT_KEYS)}) in its files")
    return weight, next((found[k] for k in BIAS_KEYS if k in found), None)


def _head(weight: torch.Tensor, bias: torch.Tensor | None, config: Any, layout: str) -> DecisionHead:
    """The head from its tensors and its ``JevConfig``."""
    w = weight.float().contiguous()
    b = (bias if bias is not None else torch.zeros(w.shape[0])).float().contiguous()
    if w.ndim != 2 or b.shape != (w.shape[0],):
        raise UnsupportedModelError(f"decision head: weight {tuple(w.shape)} and bias {tuple(b.shape)} do not fit")
    if int(config.num_verbalizers) != w.shape[0]:
        raise UnsupportedModelError(
            f"decision head: {w.shape[0]} slots in the weights, {config.num_verbalizers} in its config"
        )
    offsets = {str(k): int(v) for k, v in (config.offsets or {}).items()}
    softcap = float(config.softcap) if config.softcap is not None else None
    h = hashlib.sha256(json.dumps({"offsets": offsets, "softcap": softcap}, sort_keys=True).encode())
    h.update(w.numpy().tobytes())
    h.update(b.numpy().tobytes())
    return DecisionHead(w, b, offsets, softcap, layout, h.hexdigest())


def _checkpoint(head: DecisionHead, decision: Any, where: Path) -> DecisionCheckpoint:
    settings = asdict(decision)
    template = settings.pop("chat_template", None)
    return DecisionCheckpoint(head, settings, template, where)
