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
import json
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from logitjudge.engine.types import Question, Text
from logitjudge.errors import UnsupportedModelError

PROMPT_VERSION = "lj-prompt-1.1"  # = EngineConfig.prompt_version (tests/engine/test_config.py)
"""The default template. 1.1: labels that would clash with the options' own text are swapped
(see :func:`label_clash`). :data:`TEMPLATES` holds every selectable version."""

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
DEFAULT_NOUL_INSTRUCTIONS = "Decide whether the statement below holds for the state."

Label = tuple[int, ...]
"""The token ids of one answer label, as the model would generate them after the prompt."""


def render_text(text: Text | None) -> str:
    """A Text as the model sees it: strings as they are, objects and arrays as canonical JSON."""
    if text is None:
        return ""
    if isinstance(text, str):
        return text
    return json.dumps(text, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def display_order(question: Question, rotation: int = 0) -> tuple[int, ...]:
    """The options' displayed order of one view: ``order[position] = option index``.

    A choice asked in more than one rotation is first put in a canonical order (sorted by its
    rendered description, then its name), and rotation ``r`` starts that order at its ``r``-th
    option. The views then depend on the set of options, not on the order the request gave
    them in: every ordering of a menu gets the same branches and so the same answer, for any
    number of options (rotations average the position prior; the canonical order removes the
    request's order). A choice asked once (``rotations = 1``), and every score (its levels are
    ordered), keep the request's order, rotated by ``rotation``.

    Returns:
        A permutation of ``range(len(question.options))``, length n.
    """
    n = len(question.options)
    base: Sequence[int] = range(n)
    if question.type == "choice" and question.rotations > 1:
        base = sorted(
            range(n),
            key=lambda k: (render_text(question.options[k].description), render_text(question.options[k].name)),
        )
    return tuple(base[(k + rotation) % n] for k in range(n))


@dataclass(frozen=True)
class View:
    """One rendering of a question: its branch tokens and one label per displayed option.

    Attributes:
        branch: token ids of the question block and the chat tail (the state prefix excluded).
        labels: per displayed option, the label's token ids.
        option_index: per displayed option, the index of the request option it stands for
            (identity unless the options are rotated for debiasing).
    """

    branch: tuple[int, ...]
    labels: tuple[Label, ...]
    option_index: tuple[int, ...]


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

    def label_texts(self, question: Question) -> tuple[tuple[str, ...], tuple[Label, ...]]:
        """The label strings shown in the prompt and their token ids, for each displayed position.

        noul: the Yes/No words. score: digits ``0..n-1``, or letters ``A..`` when a level's own
        text starts with a digit (levels "1".."10" are never shown as "0. 1"). choice: letters,
        or fixed-width numbers when an option's own name reads like a letter label ("A", "B)")
        or when the tokenizer has too few single-token letter labels. See :func:`label_clash`.
        """
        n = len(question.options)
        if question.type == "noul":
            yes, no = self.noul_labels
            return (self.tokenizer.decode(list(yes)).strip(), self.tokenizer.decode(list(no)).strip()), (yes, no)
        texts = [render_text(o.name if question.type == "choice" else o.description) for o in question.options]
        if question.type == "score":
            if not label_clash("digits", texts):
                return tuple(str(i) for i in range(n)), self.score_labels[:n]
            return self.choice_label_texts[:n], self.choice_labels[:n]
        if n <= len(self.choice_labels) and not label_clash("letters", texts):
            return self.choice_label_texts[:n], self.choice_labels[:n]
        width = len(str(n))
        labels_text = tuple(str(i + 1).zfill(width) for i in range(n))
        labels = tuple(self.boundary_label(t) for t in labels_text)
        if len(set(labels)) != n:
            raise UnsupportedModelError(f"the tokenizer cannot give {n} distinct answer labels")
        return labels_text, labels

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

    def view(self, question: Question, rotation: int = 0) -> View:
        """Render one question (optionally with its options rotated by ``rotation`` places).

        For a choice the labels follow the displayed position; for a score the digit stays with
        its level (the number is the level) and only the listing order rotates.
        """
        if question.type == "continuation":
            # the instructions as the user turn, the text as the assistant's reply (teacher-forced)
            branch = self.encode_user(render_text(question.instructions)) + self.tail_ids
            return View(tuple(branch), (self.continuation_label(render_text(question.options[0].name)),), (0,))
        n = len(question.options)
        t = self.template
        order = display_order(question, rotation)  # displayed position -> option index
        texts, labels = self.label_texts(question)
        lines = []
        display_labels: tuple[Label, ...]
        option_index: tuple[int, ...]
        if question.type == "noul":
            yes_t, no_t = texts
            true, false = question.options[0].description, question.options[1].description
            instr = render_text(question.instructions) or DEFAULT_NOUL_INSTRUCTIONS
            lines.append(f"Question: {instr}")
            if true is not None:
                lines.append(f"Answer {yes_t} if: {render_text(true)}")
            if false is not None:
                lines.append(f"Answer {no_t} if: {render_text(false)}")
            lines.append(t.noul_reply.format(yes=yes_t, no=no_t))
            display_labels, option_index = labels, (0, 1)
        elif question.type == "choice":
            if question.instructions is not None:
                lines.append(f"Question: {render_text(question.instructions)}")
            else:
                lines.append("Question: Which option fits the state best?")
            if t.choice_header is not None:
                lines.append(t.choice_header)
            for pos, k in enumerate(order):
                opt = question.options[k]
                desc = "" if opt.description is None else f": {render_text(opt.description)}"
                lines.append(f"{texts[pos]}. {opt.name}{desc}")
            noun = "letter" if texts[0].isalpha() else "number"
            lines.append(t.choice_reply.format(noun=noun))
            display_labels, option_index = labels, order
        else:
            if question.instructions is not None:
                lines.append(f"Question: {render_text(question.instructions)}")
            else:
                lines.append("Question: Which level fits the state best?")
            if t.score_header is not None:
                lines.append(t.score_header.format(lo=texts[0], hi=texts[n - 1]))
            for k in order:
                lines.append(f"{texts[k]}. {render_text(question.options[k].description)}")
            noun = "letter" if texts[0].isalpha() else "number"
            lines.append(t.score_reply.format(noun=noun, lo=texts[0], hi=texts[n - 1]))
            display_labels, option_index = labels, tuple(range(n))
        branch = self.encode_user("\n".join(lines)) + self.tail_ids
        return View(tuple(branch), tuple(display_labels), tuple(option_index))

    def views(
        self, question: Question, state: Text | None = None, prefix: Sequence[int] | None = None
    ) -> tuple[View, ...]:
        """The question's views: one, or ``question.rotations`` cyclic rotations (choice/score).

        ``state`` and ``prefix`` are not read: this prompt's branches do not depend on the state
        (they are in the signature :class:`QuestionPrompt` gives every prompt builder)."""
        k = 1 if question.type in ("noul", "continuation") else max(1, min(question.rotations, len(question.options)))
        return tuple(self.view(question, r) for r in range(k))

    def temperature(self, kind: str) -> float:
        """1 for every question type: this prompt's label logits are read as they are (a
        calibration, if any, applies after the readout)."""
        return 1.0


_LETTER_LABEL = re.compile(r"[A-Z]{1,2}(?:[.):\]]|$)")


def label_clash(kind: str, texts: list[str]) -> bool:
    """True when an option's own text could be read as one of the ``kind`` labels beside it.

    ``"digits"`` (score labels 0..9) clash with any text that starts with a digit; ``"letters"``
    (choice labels A..) with any text that is, or starts with, one or two capitals followed by
    ``.``, ``)``, ``:`` or ``]`` (``"A"``, ``"B)"``, ``"AB"``). Numbers inside a text never clash.
    """
    stripped = [t.strip() for t in texts]
    if kind == "digits":
        return any(t[:1].isdigit() for t in stripped)
    return any(_LETTER_LABEL.match(t) for t in stripped)


def is_prefix_free(labels: tuple[Label, ...] | list[Label]) -> bool:
    """True when no label's token ids are a prefix of (or equal to) another label's."""
    for a, b in itertools.permutations(labels, 2):
        if b[: len(a)] == a:
            return False
    return True
