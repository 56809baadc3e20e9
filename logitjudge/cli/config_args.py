"""Command-line flags derived from the configuration dataclasses, as vLLM's ``add_cli_args`` does.

A field of :class:`~logitjudge.engine.config.EngineConfig`, :class:`~logitjudge.engine.config.VllmConfig`
or :class:`~logitjudge.server.config.ServerConfig` becomes ``--field-name``: its default is the
field's default, its ``--help`` the first sentence of the field's docstring (the string under it in the class body,
the text the configuration reference is generated from), so a default or a meaning is written
once. :func:`config_values` reads the parsed values back into the config's keyword arguments.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import re
import sys
import types
import typing
from typing import Any

__all__ = ["plain", "first_sentence", "field_docs", "add_config_argument", "config_values"]


def plain(doc: str | None) -> str:
    """The first paragraph of a docstring as plain text for ``--help``: reST roles and double
    backquotes removed (``:mod:`x``` -> x, a double-quoted literal -> the literal), lines joined."""
    first = (doc or "").strip().split("\n\n")[0]
    first = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", first)
    return " ".join(first.replace("``", "").split())


_FROM_CONFIG: Any = object()


def first_sentence(text: str) -> str:
    """``text`` up to its first full stop outside parentheses (the whole text if it has none)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "." and depth == 0 and (i + 1 == len(text) or text[i + 1] == " "):
            return text[: i + 1]
    return text


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring of each annotated field of ``cls`` and its bases (the string literal under
    the field in the class body); a subclass's own docstring wins.

    Returns:
        ``{field name: docstring}``; empty where the source cannot be read.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        module = sys.modules.get(klass.__module__)
        if module is None or getattr(module, "__file__", None) is None or klass is object:
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        (node,) = ast.parse(inspect.cleandoc("\n" + source) if source[:1].isspace() else source).body
        if not isinstance(node, ast.ClassDef):
            continue
        for before, after in zip(node.body, node.body[1:]):
            if (
                isinstance(before, ast.AnnAssign)
                and isinstance(before.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[before.target.id] = after.value.value
    return docs


def _value_type(cls: type, name: str) -> type:
    """The field's type with ``None`` left out (``int | None`` -> ``int``)."""
    hint = typing.get_type_hints(cls)[name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return hint


def add_config_argument(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    name: str,
    *,
    flag: str | None = None,
    default: Any = _FROM_CONFIG,
    help_suffix: str = "",
    **kwargs: Any,
) -> argparse.Action:
    """Add the flag of ``cls``'s field ``name`` to ``parser``.

    Args:
        parser: a parser or an argument group.
        cls: a configuration dataclass.
        name: one of its fields; the flag is ``--name`` with ``-`` for ``_`` unless ``flag``,
            and its ``dest`` is ``name`` whatever the flag.
        default: the parsed value when the flag is absent (default: the field's default; pass
            ``None`` where a later step picks it, e.g. by device).
        help_suffix: text after the docstring's first sentence, in place of ``(default ...)``:
            a default that depends on the device, a pointer to a related flag.
        kwargs: ``type``, ``choices``, ``metavar`` (``type`` default: the field's type; a
            ``bool`` field is a switch that turns its default around).

    Returns:
        The ``argparse`` action.

    Raises:
        KeyError: ``name`` is not a documented field of ``cls`` (every flag has its meaning).
    """
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    doc = field_docs(cls)[name]
    if default is _FROM_CONFIG:
        default = field.default
    text = first_sentence(plain(doc)).replace("%", "%%")
    if help_suffix:
        text = f"{text} {help_suffix}"
    value_type = _value_type(cls, name)
    if value_type is bool:
        if flag is None:
            flag = f"--{'no-' if default else ''}{name.replace('_', '-')}"
        if default:  # the flag turns the field off: say so before what the field means
            text = f"set {name} off (on by default; {name}: {text})"
        action = "store_false" if default else "store_true"
        return parser.add_argument(flag, dest=name, action=action, default=default, help=text, **kwargs)
    kwargs.setdefault("type", value_type)
    if default is not None and not help_suffix:
        text += " (default %(default)s)"
    flag = flag or f"--{name.replace('_', '-')}"
    if "choices" not in kwargs:
        kwargs.setdefault("metavar", flag.lstrip("-").replace("-", "_").upper())
    return parser.add_argument(flag, dest=name, default=default, help=text, **kwargs)


def config_values(args: argparse.Namespace, cls: type, names: typing.Iterable[str] | None = None) -> dict[str, Any]:
    """``{field: parsed value}`` for ``cls``'s fields among ``args`` (or only ``names``)."""
    wanted = [f.name for f in dataclasses.fields(cls)] if names is None else list(names)
    return {name: getattr(args, name) for name in wanted if hasattr(args, name)}
