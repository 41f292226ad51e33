"""Settings errors in the user's words: the flag or key, the value, what is allowed, and for an unknown key
the nearest known one. No pydantic text reaches the terminal.

    --trials 0: must be at least 1
    [judge] trails: no such setting; did you mean trials?

``problems`` turns a pydantic ``ValidationError`` on one of kernelfix's settings models into such lines;
the caller says how a setting is named where the user wrote it (``toml_name`` for a config file, a flag
table for the command line).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

Loc = tuple[str | int, ...]

# pydantic's error types, said as what is allowed (ctx fills the numbers).
_ALLOWED = {
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be above {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be below {lt}",
    "multiple_of": "must be a multiple of {multiple_of}",
    "literal_error": "must be one of {expected}",
    "enum": "must be one of {expected}",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text (a quoted string)",
    "list_type": "must be a list ([...])",
    "dict_type": "must be named settings (a TOML table, a JSON object)",
    "model_type": "must be named settings (a TOML table, a JSON object)",
    "model_attributes_type": "must be named settings (a TOML table, a JSON object)",
    "missing": "missing (required)",
    "string_too_short": "must have at least {min_length} character(s)",
    "string_too_long": "must have at most {max_length} characters",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} items",
    "string_pattern_mismatch": "must match {pattern}",
    "none_required": "must be left unset",
}


def problems(
    e: ValidationError, model: type[BaseModel], name: Callable[[Loc], str], *, assign: str = " = "
) -> list[str]:
    """One line per error: where (``name(loc)``), the value given (after ``assign``: " " for a flag), and what is
    allowed; an unknown key gets the nearest known one of its section (or the section's keys when none is near)."""
    out = []
    for err in e.errors(include_url=False):
        loc: Loc = tuple(err.get("loc", ()))
        kind = err.get("type", "")
        where = name(loc)
        if kind == "extra_forbidden":
            out.append(f"{where}: no such setting; {_nearest(str(loc[-1]), _known(model, loc[:-1]))}")
            continue
        value = err.get("input")
        given = f"{assign}{_show(value)}" if kind != "missing" and not isinstance(value, dict) else ""
        out.append(f"{where}{given}: {_allowed(err)}")
    return out


def _allowed(err: dict[str, Any]) -> str:
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    template = _ALLOWED.get(kind)
    if template is not None:
        try:
            return template.format(**ctx)
        except (KeyError, IndexError):
            pass
    msg = str(err.get("msg", "is not valid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return msg[:1].lower() + msg[1:] if msg.startswith("Input should") else msg


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _nearest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6) or difflib.get_close_matches(
        key.lower(), known, n=1, cutoff=0.5
    )
    if close:
        return f"did you mean {close[0]}?"
    return "known: " + ", ".join(known) if known else "this section takes none"


def _known(model: type[BaseModel], loc: Loc) -> list[str]:
    """The keys the section at ``loc`` takes (its model's fields), following nested models, dicts and lists."""
    here: Any = model
    for part in loc:
        here = _step(here, part)
        if here is None:
            return []
    return sorted(here.model_fields) if _is_model(here) else []


def _step(annotation: Any, part: str | int) -> Any:
    for option in _options(annotation):
        if _is_model(option) and isinstance(part, str) and part in option.model_fields:
            return option.model_fields[part].annotation
        origin = typing.get_origin(option)
        args = typing.get_args(option)
        if origin is dict and len(args) == 2:
            return args[1]
        if origin in (list, tuple) and args and isinstance(part, int):
            return args[0]
    return None


def _options(annotation: Any) -> list[Any]:
    """``X | None`` and ``Union[X, Y]`` as their members; anything else as itself."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _is_model(x: Any) -> bool:
    return isinstance(x, type) and issubclass(x, BaseModel)


def toml_name(loc: Loc) -> str:
    """A key as a config file writes it: ``[judge] trials``, ``[judge.tasks."gemm"] atol``, ``[jduge]``."""
    parts = [str(p) for p in loc]
    if not parts:
        return "the file"
    if len(parts) == 1:
        return f"[{parts[0]}]"
    section = ".".join(p if p.replace("_", "").isalnum() else f'"{p}"' for p in parts[:-1])
    return f"[{section}] {parts[-1]}"


def flag_name(flags: dict[str, str], section: str, source: str) -> Callable[[Loc], str]:
    """Names for settings a command line sets (``flags``: field -> flag) over a config file's ``section``:
    a field no flag set is named as the file writes it, with the file."""

    def name(loc: Loc) -> str:
        if loc and str(loc[0]) in flags:
            return flags[str(loc[0])]
        return f"{toml_name((section, *loc))} (in {source})"

    return name
