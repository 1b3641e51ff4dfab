"""The checks every value of a job's sections goes through: each field holds its declared type
(a record written by hand or by another version reaches a section as JSON), counts within what
Slurm takes, paths the file system can hold."""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from typing import TYPE_CHECKING, Literal

from hyperlaunch.job.flags import key_of
from hyperlaunch.job.text_checks import check_text, fail, shown
from hyperlaunch.slurm.time_limit import INT32_MAX

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PATH_MAX_BYTES = 4095
NAME_MAX_BYTES = 255
"""Linux's limits on a path and on one of its components (ENAMETOOLONG beyond them)."""


@functools.cache
def _field_types(kind: type) -> tuple[tuple[str, str, object], ...]:
    hints = typing.get_type_hints(kind)
    return tuple((f.name, key_of(f), hints[f.name]) for f in dataclasses.fields(kind))


def check_types(section: DataclassInstance) -> None:
    """Every field of `section` (a dataclass) holds its declared type, and its text is text a
    file can hold: a value with lone surrogates (bytes that were not UTF-8 on the command line)
    cannot be written into the script. Errors name the setting as configs do."""
    for name, key, kind in _field_types(type(section)):
        value = getattr(section, name)
        if not _is_a(value, kind):
            fail(f"{key} must be {_type_name(kind)}, got {shown(value)}")
        for text in _texts(value):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                fail(f"{key} is not valid UTF-8 text: {shown(text)}")


def _is_a(value: object, kind: object) -> bool:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return isinstance(value, str)  # which values: checked with the valid ones listed
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_is_a(item, args[0]) for item in value)
        return len(value) == len(args) and all(_is_a(item, arg) for item, arg in zip(value, args, strict=True))
    if args:  # X | None
        return any(_is_a(value, arg) for arg in args)
    if kind is type(None):
        return value is None
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)  # type: ignore[arg-type]


def _type_name(kind: object) -> str:
    text = str(kind).replace("typing.", "")
    return {"<class 'int'>": "an integer", "<class 'str'>": "text", "<class 'bool'>": "true or false"}.get(text, text)


def _texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, tuple):
        return [text for item in value for text in _texts(item)]
    return []


def check_count(flag: str, value: int | None, low: int, high: int = INT32_MAX) -> None:
    """A count within what Slurm takes (32 bits), the bound stated."""
    if value is not None and not low <= value <= high:
        fail(f"{flag} must be between {low} and {high}, got {shown(value, 40)}")


def check_path(name: str, value: str | None) -> None:
    """An absolute path the file system can hold: no component over NAME_MAX bytes, at most
    PATH_MAX in all (beyond them every open fails with ENAMETOOLONG, here or on the nodes)."""
    if value is None:
        return
    check_text(name, value, allow_newlines=True)
    if not os.path.isabs(value):
        fail(f"{name} must be an absolute path (the script runs elsewhere), got {shown(value)}")
    encoded = value.encode("utf-8")
    if len(encoded) > PATH_MAX_BYTES:
        fail(f"{name} is {len(encoded)} bytes long; a path can be at most {PATH_MAX_BYTES}: {shown(value)}")
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > NAME_MAX_BYTES:
        fail(f"{name} has a component of {len(longest)} bytes; at most {NAME_MAX_BYTES} fit in a file name: {shown(value)}")
