"""Entities of a reference answer, and whether a context states them verbatim: deterministic rules.

``context_entity_recall`` (version 2) asks the model only about what these rules cannot settle:
an entity found here verbatim (after normalisation) is present; one not found becomes a yes/no
question to the model ("does the context mention X, or the same thing written another way?"),
so equivalents (Q3 / third quarter, USA / United States) are judged by the model, not by rules.

Extraction (:func:`entities_of`), in the order found, case-insensitive duplicates dropped:

- **quoted terms**: text between double quotes, curly quotes or backticks;
- **dates**: a month name with an optional day and year ("21 March 1873", "March 2014");
- **names and numbers**: maximal runs of tokens that start with a capital letter or hold a
  digit ("Esma Sultan Mansion", "Q3 2024", "$0.042", "2014 S/S"), joined across the
  connectors "of", "de", "the", ... only between two such tokens, with a scale word kept after a
  number ("23.5 million", "20 percent"); a sentence's first word alone is dropped when it is a
  function word ("The", "It", "Yes").

Matching (:func:`find_in`): both texts are normalised (Unicode NFKD without accents, case
folded, thousands separators removed, every other non-alphanumeric character a space) and the
entity must occur as whole words.

Checking (:func:`check_entities`): an entity found verbatim is present; an entity that holds a
digit cannot be present in a context that states no number at all (no digit and no number word
such as "third", "dozen" or "million"), so the model is not asked about it; every other entity
is left to the model.

These rules are the RAGAS ``context_entity_recall`` protocol (Es et al. 2024) with rule-based
extraction in place of an LLM's, and the model in place of exact matching for what differs in
form.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

__all__ = ["EntityCheck", "check_entities", "entities_of", "find_in", "has_number", "normalise"]

_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December|"
    "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
_DATE = re.compile(
    rf"\b(?:\d{{1,2}}(?:st|nd|rd|th)?\s+)?(?:{_MONTHS})\.?(?:\s+\d{{1,2}}(?:st|nd|rd|th)?)?(?:,?\s+\d{{4}})?\b"
)
_QUOTED = re.compile(r"\"([^\"]{1,80})\"|\u201c([^\u201d]{1,80})\u201d|`([^`]{1,80})`")
_TOKEN = re.compile(r"(?:[^\s,;:!?()\[\]{}\"\u201c\u201d]|,(?=\d{3}))+")
_CONNECTORS = {
    "of",
    "for",
    "a",
    "de",
    "du",
    "la",
    "le",
    "del",
    "della",
    "von",
    "van",
    "der",
    "the",
    "y",
    "da",
    "di",
    "&",
}
_SCALES = {"thousand", "million", "billion", "trillion", "percent", "per cent", "%", "k", "m", "bn"}
_FUNCTION_WORDS = {
    "the", "a", "an", "it", "its", "this", "that", "these", "those", "he", "she", "they", "we", "i",
    "you", "in", "on", "at", "for", "from", "by", "with", "as", "yes", "no", "and", "but", "or", "if",
    "when", "while", "there", "here", "their", "his", "her", "our", "your", "my", "both", "neither",
    "not", "so", "to", "of", "after", "before", "since", "about", "only", "also", "all", "some",
}  # fmt: skip


def normalise(text: str) -> str:
    """``text`` for matching: accents removed (NFKD), case folded, ``1,378,000`` -> ``1378000``,
    every other non-alphanumeric run one space, padded with one space at each end."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).casefold()
    text = re.sub(r"(?<=\d)[,\u202f\u00a0'](?=\d{3}\b)", "", text)
    text = re.sub(r"(?<=\d)\.(?=\d)", "\x00", text)  # keep decimal points: 0.042 is not 0 042
    text = re.sub(r"[^0-9a-z\x00]+", " ", text).replace("\x00", ".")
    return f" {text.strip()} "


def find_in(entity: str, context: str) -> bool:
    """True when ``entity`` occurs in ``context`` as whole words after :func:`normalise`."""
    needle = normalise(entity)
    return bool(needle.strip()) and needle in normalise(context)


_NUMBER_WORDS = re.compile(
    r"\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
    r"fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|"
    r"ninety|hundred|thousand|million|billion|trillion|dozen|half|quarter|first|second|third|"
    r"fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|once|twice|single|double|"
    r"triple|score)s?\b",
    re.IGNORECASE,
)


def has_number(text: str) -> bool:
    """True when ``text`` states a number: a digit, or an English number word ("third", "dozen",
    "million", ...; :data:`_NUMBER_WORDS`)."""
    return any(ch.isdigit() for ch in text) or bool(_NUMBER_WORDS.search(text))


@dataclass(frozen=True)
class EntityCheck:
    """What the rules settle about one entity of the reference.

    Attributes:
        entity: the entity as written in the reference.
        status: ``"verbatim"`` (found after :func:`normalise`: present), ``"no number"`` (it
            holds a digit and the context states no number: absent) or ``"ask"`` (the model
            decides).
    """

    entity: str
    status: Literal["verbatim", "no number", "ask"]


def check_entities(reference: str, context: str) -> list[EntityCheck]:
    """The entities of ``reference`` (:func:`entities_of`), each with what the rules settle
    against ``context`` (the module docstring's "Checking")."""
    numbered = has_number(context)
    out = []
    for entity in entities_of(reference):
        if find_in(entity, context):
            out.append(EntityCheck(entity, "verbatim"))
        elif any(ch.isdigit() for ch in entity) and not numbered:
            out.append(EntityCheck(entity, "no number"))
        else:
            out.append(EntityCheck(entity, "ask"))
    return out


def _is_entity_token(tok: str) -> bool:
    core = tok.strip(".'\u2019-")
    return bool(core) and (core[0].isupper() or any(ch.isdigit() for ch in core) or core[0] in "$\u20ac\u00a3")


def _spans(sentence: str) -> list[str]:
    toks = _TOKEN.findall(sentence)
    out: list[str] = []
    run: list[str] = []
    for k, tok in enumerate(toks):
        low = tok.lower().strip(".")
        if _is_entity_token(tok):
            run.append(tok)
        elif run and low in _CONNECTORS and k + 1 < len(toks) and _is_entity_token(toks[k + 1]):
            run.append(tok)
        elif run and low in _SCALES and any(ch.isdigit() for ch in run[-1]):
            run.append(tok)
            out.append(" ".join(run))
            run = []
        else:
            if run:
                out.append(" ".join(run))
            run = []
        if run and k == 0 and len(run) == 1 and low in _FUNCTION_WORDS and not any(c.isdigit() for c in tok):
            run = []  # a sentence's first word alone: "The", "It"
    if run:
        out.append(" ".join(run))
    cleaned = []
    for span in out:
        words = span.split()
        while words and words[0].lower().strip(".") in _FUNCTION_WORDS and len(words) > 1:
            words = words[1:]
        span = " ".join(words).strip(".'\u2019-")
        if span and not (len(words) == 1 and span.lower() in _FUNCTION_WORDS):
            cleaned.append(span)
    return cleaned


def entities_of(text: str) -> list[str]:
    """The entities of ``text`` (see the module docstring), in order of appearance, without
    case-insensitive duplicates; ``[]`` for text with none (e.g. "yes")."""
    found: list[tuple[int, str]] = []
    taken: list[tuple[int, int]] = []
    for pattern in (_QUOTED, _DATE):
        for m in pattern.finditer(text):
            value = next((g for g in m.groups() if g), m.group(0)) if m.groups() else m.group(0)
            if value.strip():
                found.append((m.start(), value.strip()))
                taken.append(m.span())
    rest = list(text)
    for a, b in taken:
        rest[a:b] = [" "] * (b - a)
    masked = "".join(rest)
    for m in re.finditer(r"(?:[^\n.!?;]|[.!?;](?=\S))+", masked):  # "0.042" and "S/S" stay whole
        sentence = m.group(0)
        for span in (sp for part in re.split(r"[,;:()\[\]{}](?!\d{3})", sentence) for sp in _spans(part)):
            found.append((m.start() + max(0, sentence.find(span.split()[0])), span))
    seen: set[str] = set()
    out: list[str] = []
    for _, value in sorted(found, key=lambda x: x[0]):
        key = normalise(value)
        if key.strip() and key not in seen:
            seen.add(key)
            out.append(value)
    return out
