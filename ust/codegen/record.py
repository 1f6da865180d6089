"""Frozen records for the IR and the lowering's plans: what ``@dataclass(frozen=True)`` gives
(keyword or positional construction with defaults, ``__post_init__``, field-wise equality and
hash, the same ``repr``, immutability, :func:`replace`), without the
code ``dataclasses`` generates per class.

Why: ``dataclasses`` builds each class's ``__init__``, ``__eq__``, ``__hash__``, ``__repr__``,
``__setattr__`` and ``__delattr__`` from source text through ``exec``; for the two dozen IR and
plan classes that was most of ``import ust.codegen`` (~15-20 ms of a 37 ms first custom-format
matmul in a new process, whose kernel comes from the disk cache but whose IR is still built
to key it).  Here the methods are written once, on :class:`Record`, and read the field table
each subclass gets when it is defined.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:  # type checkers read the subclasses as frozen dataclasses
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Any:
        """At run time a no-op (``typing`` has it from Python 3.11 only)."""
        return lambda cls: cls


__all__ = ["Record", "field", "replace"]

_MISSING: Any = object()
_R = TypeVar("_R")


class _Field:
    """A field's default and whether equality and hashing read it (:func:`field`)."""

    __slots__ = ("compare", "default")

    def __init__(self, default: Any, compare: bool) -> None:
        self.default, self.compare = default, compare


def field(*, default: Any = _MISSING, compare: bool = True) -> Any:
    """A field with a default (an immutable value: records are shared) that equality and
    hashing may leave out (``compare=False``), as ``dataclasses.field``."""
    return _Field(default, compare)


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Record:
    """Base of a frozen record: annotate the fields in the class body, as for a dataclass."""

    #: field names in order; their defaults (a missing one has none); the compared ones
    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}
    _compared: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = list(cls._fields)
        defaults = dict(cls._defaults)
        compared = list(cls._compared)
        for name, annotation in inspect.get_annotations(cls).items():
            if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            value = cls.__dict__.get(name, _MISSING)
            compare = True
            if isinstance(value, _Field):
                value, compare = value.default, value.compare
                if value is _MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, value)
            if name not in fields:
                fields.append(name)
            if value is not _MISSING:
                defaults[name] = value
            elif name in defaults:
                raise TypeError(f"{cls.__name__}: field {name!r} has no default but an earlier one does")
            if compare and name not in compared:
                compared.append(name)
            elif not compare and name in compared:
                compared.remove(name)
        seen_default = False
        for name in fields:
            if name in defaults:
                seen_default = True
            elif seen_default:
                raise TypeError(f"{cls.__name__}: non-default field {name!r} follows a default one")
        cls._fields, cls._defaults, cls._compared = tuple(fields), defaults, tuple(compared)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(
                f"{type(self).__name__}() takes {len(fields)} arguments but {len(args)} were given"
            )
        d = self.__dict__
        for name, value in zip(fields, args):
            d[name] = value
        for name in fields[len(args) :]:
            value = kwargs.pop(name, _MISSING)
            if value is _MISSING:
                value = self._defaults.get(name, _MISSING)
                if value is _MISSING:
                    raise TypeError(f"{type(self).__name__}() missing required argument {name!r}")
            d[name] = value
        if kwargs:
            raise TypeError(f"{type(self).__name__}() got unexpected or repeated arguments {sorted(kwargs)}")
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    def _key(self) -> tuple[Any, ...]:
        d = self.__dict__
        return tuple(d[name] for name in self._compared)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        d = self.__dict__
        return f"{type(self).__qualname__}({', '.join(f'{n}={d[n]!r}' for n in self._fields)})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def replace(obj: _R, **changes: Any) -> _R:
    """``obj`` with some fields changed: a :class:`Record`, or a dataclass (``dataclasses.replace``)."""
    if not isinstance(obj, Record):
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    d = obj.__dict__
    unknown = set(changes) - set(obj._fields)
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no fields {sorted(unknown)}")
    return type(obj)(**{name: changes.get(name, d[name]) for name in obj._fields})
