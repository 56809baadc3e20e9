"""Decision checkpoints' own prompt: ``decision.json`` and ``decision_template.jinja``.

transformers' ``pipeline("decision")`` (transformers >= 5.24) keeps a decision model's settings
beside its weights: ``decision.json`` (option labels and temperature per question type, the order
in which a noul's options reach the template) and ``decision_template.jinja`` (a chat template
that renders ``state`` and one ``question``). A model directory holding a template is served with
that prompt through this engine's packing and readout, instead of :mod:`logitjudge.engine.prompt`:

- each question is rendered alone, as the pipeline does (``{"role": "user", "content": ""}`` with
  the template's variables ``state`` and ``question``, generation prompt added); the tokens every
  rendering of the state shares become the request's prefix (run once), the rest of each
  rendering its branch, so questions never see each other;
- the answer is read where the pipeline reads it: after the generation prompt, or before the
  template's one ``<|mark|>`` (tokens after the mark cannot change that position's logits, so the
  branch ends there); each option's label (``labels`` per type, default ``Yes``/``No`` and
  ``A``.. ``Z``) must be a single token, as in the pipeline;
- ``temperature`` per type divides the label logits before the softmax (the pipeline's
  ``TemperatureLogitsWarper``), as :attr:`~logitjudge.engine.pack.QuestionPlan.temperature` in
  the readout's per-view softmax; a calibration, if any, applies after it.

With equal prompts the probabilities equal the pipeline's (``tests/engine/test_decision.py``).
A model with its own decision head (a ``JevForDecision`` folder, or a base model with
``head.safetensors`` beside its weights: :mod:`logitjudge.engine.interop`) is served with its
checkpoint's prompt (its template, or without one the pipeline's generic prompt in the model's
chat template, read at the last token) and its head scores the options in place of their label
tokens: each option's "label" is the head's slot for it (:meth:`DecisionPromptBuilder.views`),
asked in the template's one option order, as the pipeline does (no rotations).

Not supported (:class:`~logitjudge.errors.UnsupportedModelError` at load): templates reading
``questions`` (all questions in one prompt: they would see each other), more than one mark per
prompt, LoRA ``adapter`` subfolders, ``sanitize_control_tokens: false``, and decision heads on the
vLLM backend. A continuation question (the engine's likelihood readout) has no place in a
decision template: it is refused per request.

Source: transformers 5.24 ``transformers/decision/{configuration_utils,template_utils}.py`` and
``pipelines/decision.py`` (5.25 for decision heads).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logitjudge.engine.interop import DecisionCheckpoint, DecisionHead, read_checkpoint
from logitjudge.engine.prompt import PromptBuilder, QuestionPrompt
from logitjudge.engine.question_types import question_type
from logitjudge.engine.types import Question, Text, View, render_text
from logitjudge.errors import InvalidRequestError, UnsupportedModelError

logger = logging.getLogger(__name__)

DECISION_CONFIG_NAME = "decision.json"
DECISION_TEMPLATE_NAME = "decision_template.jinja"
MARK, SPLIT = "<|mark|>", "<|split|>"
DEFAULT_LABELS = {"noul": ["Yes", "No"], "choice": list(string.ascii_uppercase), "score": list(string.ascii_uppercase)}

_PROBES = ("!", "?")
"""Two one-character instructions whose renderings differ right after the state: the tokens
before the first difference are the state's prefix."""


@dataclass(frozen=True)
class DecisionSettings:
    """A model directory's ``decision.json`` and ``decision_template.jinja``.

    Attributes:
        template: the Jinja chat template; ``None``: the pipeline's generic prompt as the user
            message of the model's own chat template (decision-head checkpoints only).
        labels: single-token option labels per question type (``noul``, ``choice``, ``score``).
        temperature: per question type, > 0 (1 = none).
        noul_options: the order in which a noul's ``true`` and ``false`` reach the template.
        digest: sha256 of the two files' bytes (part of the prompt version); for a decision
            head, of the settings, the template and the head's weights.
    """

    template: str | None
    labels: dict[str, list[str]] = field(default_factory=dict)
    temperature: dict[str, float] = field(default_factory=dict)
    noul_options: tuple[str, str] = ("true", "false")
    digest: str = ""

    def labels_for(self, kind: str, n: int) -> list[str]:
        """The first ``n`` labels of question type ``kind``.

        Raises:
            InvalidRequestError: the settings have fewer than ``n`` labels for ``kind``.
        """
        labels = self.labels.get(kind) or DEFAULT_LABELS.get(kind)
        if not labels:
            raise InvalidRequestError(
                f"this model's {DECISION_TEMPLATE_NAME} has no labels for a {kind} question "
                f"(labels.{kind} in its {DECISION_CONFIG_NAME})",
                field=("questions",),
            )
        if len(labels) < n:
            raise InvalidRequestError(
                f"this model reads at most {len(labels)} options for a {kind} question, got {n} "
                f"(labels.{kind} in its {DECISION_CONFIG_NAME})",
                field=("questions",),
            )
        return labels[:n]


def question_prompt(
    source: str,
    tokenizer: Any,
    version: str,
    max_single_token_labels: int | None = None,
    *,
    decision_heads: bool = True,
) -> QuestionPrompt:
    """The prompt builder of a model at ``source`` (a directory, or a name): the model's own
    :class:`DecisionPromptBuilder` when the directory holds a decision head
    (:func:`~logitjudge.engine.interop.read_checkpoint`) or keeps a ``decision_template.jinja``,
    else the engine's :class:`~logitjudge.engine.prompt.PromptBuilder` of prompt ``version``.
    Both backends (transformers and vLLM) choose their prompt here; ``decision_heads=False``
    (vLLM, which scores label tokens itself) refuses a decision head.

    Raises:
        UnsupportedModelError: see :func:`read_decision_settings` and
            :func:`~logitjudge.engine.interop.read_checkpoint`, or a decision head where
            ``decision_heads`` is false.
    """
    checkpoint = read_checkpoint(source) if Path(source).is_dir() else None
    if checkpoint is not None:
        if not decision_heads:
            raise UnsupportedModelError(
                f"{source}: a model with its own decision head ({checkpoint.head.layout}) is served on the "
                "transformers backend only"
            )
        return DecisionPromptBuilder(tokenizer, head_settings(checkpoint), head=checkpoint.head)
    decision = read_decision_settings(source) if Path(source).is_dir() else None
    if decision is not None:
        return DecisionPromptBuilder(tokenizer, decision)
    if (Path(source) / DECISION_CONFIG_NAME).is_file():
        logger.warning(
            "%s: %s without %s is not used (it sets labels and temperatures of the pipeline's "
            "generic prompt); answering with the engine's prompt %s",
            source,
            DECISION_CONFIG_NAME,
            DECISION_TEMPLATE_NAME,
            version,
        )
    return PromptBuilder(tokenizer, max_single_token_labels=max_single_token_labels, version=version)


def read_decision_settings(directory: str | Path) -> DecisionSettings | None:
    """The decision settings of a model directory, or ``None`` when it has no
    ``decision_template.jinja`` (a ``decision.json`` alone changes only labels and temperatures
    of the pipeline's generic prompt, which this engine does not use).

    Raises:
        UnsupportedModelError: a setting this engine cannot honour (see the module docstring),
            or an unreadable ``decision.json``.
    """
    path = Path(directory)
    template_file, config_file = path / DECISION_TEMPLATE_NAME, path / DECISION_CONFIG_NAME
    if not template_file.is_file():
        return None
    raw = config_file.read_bytes() if config_file.is_file() else b"{}"
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise UnsupportedModelError(f"{config_file}: not JSON ({exc})") from exc
    if not isinstance(config, dict):
        raise UnsupportedModelError(f"{config_file}: not a JSON object")
    template = template_file.read_text(encoding="utf-8")
    digest = hashlib.sha256(template.encode("utf-8") + b"\0" + raw).hexdigest()
    return _settings(config, template, config_file, template_file, digest)


def head_settings(checkpoint: DecisionCheckpoint) -> DecisionSettings:
    """The decision settings of a checkpoint with a decision head (its ``DecisionConfig``), checked
    as :func:`read_decision_settings` checks a folder's; the digest covers the head's weights.

    Raises:
        UnsupportedModelError: as :func:`read_decision_settings`.
    """
    canonical = json.dumps(checkpoint.settings, sort_keys=True).encode("utf-8")
    digest = hashlib.sha256(
        (checkpoint.template or "").encode("utf-8") + b"\0" + canonical + b"\0" + checkpoint.head.digest.encode()
    ).hexdigest()
    where = checkpoint.where.parent / DECISION_TEMPLATE_NAME
    return _settings(checkpoint.settings, checkpoint.template, checkpoint.where, where, digest)


def _settings(
    config: dict[str, Any], template: str | None, config_file: Path, template_file: Path, digest: str
) -> DecisionSettings:
    """Check decision settings (``decision.json``'s keys) and the template (module docstring)."""
    if config.get("adapter"):
        raise UnsupportedModelError(f"{config_file}: LoRA adapters ('adapter') are not supported")
    if config.get("sanitize_control_tokens", True) is not True:
        raise UnsupportedModelError(f"{config_file}: sanitize_control_tokens must be true (user text is escaped)")
    noul = tuple(config.get("noul_options", ("true", "false")))
    if sorted(noul) != ["false", "true"]:
        raise UnsupportedModelError(f"{config_file}: noul_options must order 'true' and 'false', got {noul!r}")
    temperature = {str(k): float(v) for k, v in (config.get("temperature") or {}).items()}
    if any(t <= 0 for t in temperature.values()):
        raise UnsupportedModelError(f"{config_file}: temperatures must be > 0, got {temperature}")
    if template is not None and _reads_questions(template):
        raise UnsupportedModelError(
            f"{template_file}: a template that renders all 'questions' in one prompt lets them see each other"
        )
    labels = {str(k): [str(x) for x in v] for k, v in (config.get("labels") or {}).items()}
    return DecisionSettings(template, labels, temperature, (str(noul[0]), str(noul[1])), digest)


def _reads_questions(template: str) -> bool:
    """Whether the Jinja ``template`` reads the variable ``questions``."""
    from jinja2 import Environment, meta

    return "questions" in meta.find_undeclared_variables(Environment().parse(template))


class DecisionPromptBuilder:
    """Renders states and questions with a decision template (the interface of
    :class:`~logitjudge.engine.prompt.PromptBuilder` that the engine plans with).

    Args:
        tokenizer: the model's fast tokenizer (``<|mark|>`` and ``<|split|>`` are added to it as
            special tokens, as the pipeline does; they never reach the model).
        settings: from :func:`read_decision_settings` (or :func:`head_settings`).
        head: the checkpoint's decision head, which scores the options in place of their labels
            (:mod:`logitjudge.engine.interop`); ``None``: the labels' logits.

    Raises:
        UnsupportedModelError: the installed transformers cannot escape control tokens in user
            text (``apply_chat_template(sanitize_control_tokens=...)``, transformers >= 5.24).
    """

    def __init__(self, tokenizer: Any, settings: DecisionSettings, head: DecisionHead | None = None) -> None:
        if "sanitize_control_tokens" not in inspect.signature(tokenizer.apply_chat_template).parameters:
            raise UnsupportedModelError(
                f"{DECISION_TEMPLATE_NAME} needs transformers >= 5.24 "
                "(apply_chat_template(sanitize_control_tokens=...))"
            )
        from transformers.tokenization_utils_base import AddedToken

        if MARK not in tokenizer.get_vocab():
            tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in (MARK, SPLIT)])
        self.tokenizer = tokenizer
        self.settings = settings
        self.mark_id, self.split_id = tokenizer.convert_tokens_to_ids([MARK, SPLIT])
        self.head = head
        """Read by the engine's readout (``Readout.decision_head``) in place of the LM head."""
        self.version = f"decision-{'head' if head is not None else 'template'}-{settings.digest[:12]}"
        self._labels: dict[str, int] = {}
        self._generic: Any = None
        if settings.template is None:  # the pipeline's own generic prompt and Jinja environment
            from transformers.decision.template_utils import DECISION_PROMPT
            from transformers.utils.chat_template_utils import _compile_jinja_template

            self._generic = _compile_jinja_template(DECISION_PROMPT)

    # -- rendering ---------------------------------------------------------------------------

    def _render(self, state: Text, question: dict[str, Any]) -> list[int]:
        """Token ids of one prompt, sentinels dropped, cut at its mark (if any). Without a
        template: the pipeline's generic prompt as the user message of the model's chat template."""
        if self._generic is not None:
            content, template = self._generic.render(state=state, question=question), {}
        else:
            content, template = "", {"chat_template": self.settings.template, "state": state, "question": question}
        ids = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}],
            **template,
            add_generation_prompt=True,
            enable_thinking=False,
            sanitize_control_tokens=True,
            tokenize=True,
            return_dict=True,
        )["input_ids"]
        ids = list(ids[0] if ids and isinstance(ids[0], list) else ids)
        marks = [k for k, t in enumerate(ids) if t == self.mark_id]
        if len(marks) > 1:
            raise UnsupportedModelError(
                f"{DECISION_TEMPLATE_NAME}: one {MARK} per prompt is supported, got {len(marks)}"
            )
        if marks:
            ids = ids[: marks[0]]
        return [t for t in ids if t != self.split_id]

    @staticmethod
    def _question(kind: str, instructions: Any, options: list[str], labels: list[str], descriptions: list[Any]) -> dict:
        """The ``question`` variable the pipeline gives the template (its ``Question`` as a dict)."""
        return {
            "name": "q",
            "type": kind,
            "instructions": instructions,
            "options": options,
            "labels": labels,
            "descriptions": descriptions,
        }

    def prefix_ids(self, state: Text) -> list[int]:
        """The tokens every question's prompt shares for ``state`` (depends on the state only):
        the common start of probe renderings that differ in their instructions and, since a
        template may write the question's type before the state (JEV's does), in their type."""
        first, *others = (
            self._render(state, self._question(kind, p, options, self.settings.labels_for(kind, 2), [None, None]))
            for kind, options in (("noul", ["true", "false"]), ("choice", ["a", "b"]), ("score", ["0", "1"]))
            for p in _PROBES
        )
        n = len(first)
        for other in others:
            n = next((k for k in range(min(n, len(other))) if first[k] != other[k]), min(n, len(other)))
        return first[:n]

    def label_id(self, label: str) -> int:
        """The single token id of ``label`` (as the pipeline's ``label_token_ids``).

        Raises:
            UnsupportedModelError: ``label`` is not one known token.
        """
        if label not in self._labels:
            ids = self.tokenizer(label, add_special_tokens=False)["input_ids"]
            if len(ids) != 1 or ids[0] == self.tokenizer.unk_token_id:
                raise UnsupportedModelError(f"the label {label!r} is not a single token for this model")
            self._labels[label] = ids[0]
        return self._labels[label]

    def temperature(self, kind: str) -> float:
        """The settings' temperature for question type ``kind`` (1 = none)."""
        return self.settings.temperature.get(kind, 1.0)

    def views(self, question: Question, state: Text, prefix: Sequence[int]) -> tuple[View, ...]:
        """The question's views over ``state``, each branch its rendering less ``prefix`` (what
        :meth:`prefix_ids` gave for the state): one per cyclic rotation of a choice's options
        (``rotations``), one for noul and score (a score's levels are positions). With a decision
        head: one view in the template's order (the head scores positions, as in the pipeline),
        each option's label its head slot.

        Raises:
            InvalidRequestError: a continuation question, or more options than labels (or head slots).
        """
        spec = question_type(question.type)
        if spec.likelihood:
            raise InvalidRequestError(
                f"{spec.name} questions need the engine's own prompt; this model is served with its "
                f"{DECISION_TEMPLATE_NAME}",
                field=("questions",),
            )
        n = len(question.options)
        # the template lists a score's levels in order (positions are levels): only a set rotates
        rotations = spec.n_views(question) if spec.order_free and self.head is None else 1
        labels = self.settings.labels_for(question.type, n)
        if self.head is not None:  # the head's slot for each displayed option, read at the same position
            label_ids = tuple((slot,) for slot in self.head.rows(question.type, n))
            question = dataclasses.replace(question, rotations=1)  # the request's order, as the pipeline's
        else:
            label_ids = tuple((self.label_id(lab),) for lab in labels)
        out = []
        for r in range(rotations):
            if spec.name == "noul":  # true and false reach the template in its settings' order
                order = tuple(0 if o == "true" else 1 for o in self.settings.noul_options)
                names = list(self.settings.noul_options)
            else:
                order = spec.display_order(question, r)
                names = [render_text(question.options[k].name) for k in order]
            descriptions = [question.options[k].description for k in order]
            q = self._question(question.type, question.instructions, names, labels, descriptions)
            ids = self._render(state, q)
            if list(ids[: len(prefix)]) != list(prefix):
                raise UnsupportedModelError(
                    f"{DECISION_TEMPLATE_NAME}: a question's prompt does not start with the state's"
                )
            out.append(View(tuple(ids[len(prefix) :]), label_ids, order))
        return tuple(out)
