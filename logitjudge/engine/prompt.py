"""Prompt: the state and each question rendered into token ids, and the answer labels.

Versioned templates (:data:`TEMPLATES`; the default :data:`PROMPT_VERSION`), wrapped in the
model's own chat template. The default, ``lj-prompt-1.1``::

    <chat head: system turn, user turn opens>
    State:
    {state}                                  <- the prefix ends here, after a newline
    Question: {instructions}                 <- each question's branch starts here
    Options:
    A. {name}: {description}
    ...
    Reply with the letter of the best option.
    <chat tail: user turn closes, assistant turn opens>   <- the answer label is read next

A ``continuation`` question (the engine's likelihood readout) renders its instructions as the
user turn and its one option's text as the assistant's reply: the label is that whole text,
scored token by token (``log P(text | state, instructions)``).

``lj-prompt-2`` (the lean one) keeps the question and option lines and drops the boilerplate: no
``Options:`` / ``Levels ...`` header, a shorter system turn and answer cue ("Yes or No?",
"Answer with a letter.").

The prefix depends on the state only: never on the questions, their ids, order or count. Each
branch depends on its own question only. All user text (state, instructions, option names and
descriptions) is tokenized with ``split_special_tokens=True``, so a ``<|im_end|>`` inside a
document reaches the model as plain text tokens and cannot forge the chat structure.

Labels are token-id sequences read at the real prompt boundary: encoding ``tail + label`` must
give ``tail ids + label ids``. noul uses the model's Yes/No words, score the digits 0..n-1,
choice A..Z then two-letter strings that this tokenizer makes single tokens at the boundary.
When a question needs more labels than the tokenizer has single tokens for, it gets fixed-width
numbers (``001``..``255``) instead, possibly several tokens each; equal-length distinct strings
are never token prefixes of each other, so summed log-probabilities compare fairly.
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from logitjudge.engine.question_types import question_type
from logitjudge.engine.types import Label, Question, Text, View, render_text
from logitjudge.errors import UnsupportedModelError

PROMPT_VERSION = "lj-prompt-1.1"  # = EngineConfig.prompt_version (tests/engine/test_config.py)
"""The default template. 1.1: labels that would clash with the options' own text are swapped
(see :func:`~logitjudge.engine.question_types.label_clash`). :data:`TEMPLATES` holds every selectable version."""

SYSTEM_TEXT = (
    "You are a careful, impartial judge. Read the state, then answer the question about it. "
    "Reply with a single label and nothing else."
)


@dataclass(frozen=True)
class Template:
    """The words of one prompt version around the state, the question and its options.

    ``{yes}``/``{no}`` are the noul label words, ``{noun}`` is ``letter`` or ``number``, ``{lo}``
    and ``{hi}`` the lowest and highest score labels.
    """

    version: str
    system: str
    noul_reply: str
    choice_header: str | None
    choice_reply: str
    score_header: str | None
    score_reply: str


TEMPLATES = {
    "lj-prompt-1.1": Template(
        "lj-prompt-1.1",
        SYSTEM_TEXT,
        noul_reply="Reply with {yes} or {no}.",
        choice_header="Options:",
        choice_reply="Reply with the {noun} of the best option.",
        score_header="Levels, from lowest ({lo}) to highest ({hi}):",
        score_reply="Reply with the {noun} of the level that fits best.",
    ),
    # The lean template (issue 13): the same question and option lines, less boilerplate:
    # SmolLM2's tokenizer: system 29 -> 15 tokens; noul reply 8 -> 5, choice 14 -> 6, score 27 -> 13.
    "lj-prompt-2": Template(
        "lj-prompt-2",
        "You are a careful, impartial judge. Reply with a single label.",
        noul_reply="{yes} or {no}?",
        choice_header=None,
        choice_reply="Answer with a {noun}.",
        score_header=None,
        score_reply="Answer with a {noun} from {lo} (lowest) to {hi} (highest).",
    ),
}
"""Every selectable prompt version (``EngineConfig.prompt_version``, ``--prompt-version``)."""
_PLACEHOLDER = "\u2063LJ-CONTENT\u2063"
NOUL_LABELS = (("Yes", "No"), ("yes", "no"), ("A", "B"))


class QuestionPrompt(Protocol):
    """What the engine asks of a prompt builder (:class:`PromptBuilder`, this engine's prompt, and
    :class:`~logitjudge.engine.decision.DecisionPromptBuilder`, a decision checkpoint's template):
    the state's prefix, each question's views (branches after that prefix, with their labels),
    and the temperature its label logits are read at."""

    version: str
    tokenizer: Any

    def prefix_ids(self, state: Text) -> list[int]: ...

    def views(self, question: Question, state: Text, prefix: Sequence[int]) -> tuple[View, ...]: ...

    def temperature(self, kind: str) -> float: ...


class PromptBuilder:
    """Renders states and questions to token ids for one tokenizer.

    Args:
        tokenizer: a fast transformers tokenizer.
        version: a key of :data:`TEMPLATES` (default :data:`PROMPT_VERSION`).
        max_single_token_labels: cap on single-token choice labels (``None``: as many as the
            tokenizer supplies). Lower it only to test the multi-token path.

    Raises:
        UnsupportedModelError: the chat template's tail does not keep its tokens when a label
            follows it (the readout boundary would be wrong), or an unknown version.
    """

    def __init__(
        self, tokenizer: Any, *, max_single_token_labels: int | None = None, version: str = PROMPT_VERSION
    ) -> None:
        if version not in TEMPLATES:
            raise UnsupportedModelError(f"unknown prompt version {version!r}; one of {tuple(TEMPLATES)}")
        self.template = TEMPLATES[version]
        self.version = version
        self.tokenizer = tokenizer
        head, tail = self._chat_frame()
        self.head_ids = self._encode_special(head)
        bos = getattr(tokenizer, "bos_token_id", None)
        if bos is not None and not self.head_ids[:1] == [bos]:
            probe = tokenizer("x", add_special_tokens=True)["input_ids"]
            if probe[:1] == [bos]:
                self.head_ids = [bos, *self.head_ids]
        self.tail_text = tail
        self.tail_ids = self._encode_special(tail)
        self.noul_labels = self._first_working(NOUL_LABELS)
        self.score_labels = tuple(self.boundary_label(str(i)) for i in range(10))
        choice = [c for c in self._choice_candidates() if c is not None]
        if max_single_token_labels is not None:
            choice = choice[:max_single_token_labels]
        self.choice_label_texts = tuple(t for t, _ in choice)
        self.choice_labels = tuple(ids for _, ids in choice)

    # -- encoding ----------------------------------------------------------------------------

    def _encode_special(self, text: str) -> list[int]:
        """Template text: control tokens in it are parsed as control tokens."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_user(self, text: str) -> list[int]:
        """User text: control-token strings are split into plain tokens (cannot forge structure)."""
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])

    def _chat_frame(self) -> tuple[str, str]:
        tok = self.tokenizer
        system = self.template.system
        if getattr(tok, "chat_template", None):
            for messages in (
                [{"role": "system", "content": system}, {"role": "user", "content": _PLACEHOLDER}],
                [{"role": "user", "content": system + "\n\n" + _PLACEHOLDER}],
            ):
                try:
                    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                except Exception:  # noqa: BLE001 - templates raise anything (e.g. "no system role")
                    continue
                if isinstance(text, str) and text.count(_PLACEHOLDER) == 1:
                    head, tail = text.split(_PLACEHOLDER)
                    return head, tail
        return system + "\n\n", "\nAnswer:\n"

    def boundary_label(self, text: str) -> Label:
        """Token ids of ``text`` as it follows the chat tail.

        Raises:
            UnsupportedModelError: the tail's own tokens change when the label follows it.
        """
        ids = self._encode_special(self.tail_text + text)
        n = len(self.tail_ids)
        if ids[:n] != self.tail_ids or len(ids) == n:
            raise UnsupportedModelError(
                f"the chat template's answer boundary is unstable for label {text!r} with this tokenizer"
            )
        return tuple(ids[n:])

    def _first_working(self, pairs: tuple[tuple[str, str], ...]) -> tuple[Label, Label]:
        """The first label pair that is single-token and distinct; else the first pair, multi-token."""
        fallback = None
        for a, b in pairs:
            la, lb = self.boundary_label(a), self.boundary_label(b)
            if fallback is None:
                fallback = (la, lb)
            if len(la) == 1 and len(lb) == 1 and la != lb:
                return la, lb
        assert fallback is not None
        if not is_prefix_free(fallback):
            raise UnsupportedModelError("the noul labels are token prefixes of each other")
        return fallback

    def _choice_candidates(self) -> list[tuple[str, Label] | None]:
        """A..Z, then every uppercase pair that is one token at the boundary; distinct ids only."""
        letters = string.ascii_uppercase
        seen: set[int] = set()
        out: list[tuple[str, Label] | None] = []
        for text in itertools.chain(letters, ("".join(p) for p in itertools.product(letters, repeat=2))):
            ids = self.boundary_label(text)
            if len(ids) == 1 and ids[0] not in seen:
                seen.add(ids[0])
                out.append((text, ids))
        return out

    # -- rendering ---------------------------------------------------------------------------

    def prefix_ids(self, state: Text) -> list[int]:
        """The shared state prefix: chat head + ``State:\\n{state}\\n``. Depends on the state only."""
        return self.head_ids + self.encode_user("State:\n" + render_text(state) + "\n")

    def continuation_label(self, text: str) -> Label:
        """Token ids of user ``text`` as the assistant's reply after the chat tail: the text
        encoded on its own (control-token strings split into plain tokens, like all user text).

        Raises:
            UnsupportedModelError: the text is empty once tokenized, or the tokenizer would merge
                the tail's last token with the text (the boundary would differ from a real turn).
        """
        ids = tuple(self.encode_user(text))
        if not ids:
            raise UnsupportedModelError("a continuation's text has no tokens")
        joined = self.tokenizer(self.tail_text + text, add_special_tokens=False)["input_ids"]
        if "<|" not in text and list(joined[: len(self.tail_ids)]) != list(self.tail_ids):
            raise UnsupportedModelError("the chat template's answer boundary is unstable for this continuation")
        return ids

    def branch(self, lines: Sequence[str]) -> tuple[int, ...]:
        """A question block's branch: its lines as user text, then the chat tail."""
        return (*self.encode_user("\n".join(lines)), *self.tail_ids)

    def view(self, question: Question, rotation: int = 0) -> View:
        """Render one question (its options rotated by ``rotation`` places): the ``render``
        function of its type's record (:mod:`logitjudge.engine.question_types`)."""
        return question_type(question.type).render(self, question, rotation)

    def views(
        self, question: Question, state: Text | None = None, prefix: Sequence[int] | None = None
    ) -> tuple[View, ...]:
        """The question's views: one per rotation its type asks for
        (:meth:`~logitjudge.engine.question_types.QuestionTypeDef.n_views`).

        ``state`` and ``prefix`` are not read: this prompt's branches do not depend on the state
        (they are in the signature :class:`QuestionPrompt` gives every prompt builder)."""
        k = question_type(question.type).n_views(question)
        return tuple(self.view(question, r) for r in range(k))

    def temperature(self, kind: str) -> float:
        """1 for every question type: this prompt's label logits are read as they are (a
        calibration, if any, applies after the readout)."""
        return 1.0


def is_prefix_free(labels: tuple[Label, ...] | list[Label]) -> bool:
    """True when no label's token ids are a prefix of (or equal to) another label's."""
    for a, b in itertools.permutations(labels, 2):
        if b[: len(a)] == a:
            return False
    return True
