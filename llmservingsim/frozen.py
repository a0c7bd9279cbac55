"""Fast construction of read-only slotted records (issue 15: speed).

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``
(its own ``__setattr__`` raises), and so does any class that forbids assignment; under
CPython 3.11 that is some 1,500 instructions a field, so the records made once per call
(``InstanceLoad``, ``CallInfo``, ``FinishedCall``, ``Signals``, ``CallRecord``, ``PCBView``,
...) spent most of their cost there. ``maker(cls)`` returns a function of the fields,
positionally in order, that builds the same object in a fraction of that: an instance of a
private twin class with the same bases and slots but ordinary assignment (plain slot stores),
whose ``__class__`` is then set to ``cls``. CPython allows that between classes of the same
layout and checks it (a ``TypeError`` otherwise, here when the maker is made). The result is
a ``cls`` instance holding exactly the values ``cls(*fields)`` would: same type, equality,
hash, repr, and assignment still raises.

Only for classes whose constructor just stores its arguments: ``maker`` refuses a dataclass
with ``__post_init__``, a field outside ``__init__`` or one that is not a slot.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

__all__ = ["maker"]

_RESERVED = ("_new", "_twin", "_cls", "_obj")


def _slots_of(cls: type) -> set:
    out: set = set()
    for k in cls.__mro__:
        slots = k.__dict__.get("__slots__", ())
        out.update((slots,) if isinstance(slots, str) else slots)
    return out


def maker(cls: type, names: Optional[Sequence[str]] = None) -> Callable:
    """``make(*values)``: a ``cls`` whose attribute ``names[i]`` is ``values[i]``. ``names``
    defaults to a dataclass's fields in order (then ``make(*v)`` equals ``cls(*v)``)."""
    if names is None:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__}: give the field names of a class that is not a dataclass")
        if hasattr(cls, "__post_init__"):
            raise TypeError(f"{cls.__name__} has __post_init__: its constructor does more than store")
        fields = dataclasses.fields(cls)
        if not all(f.init for f in fields):
            raise TypeError(f"{cls.__name__} has a field outside __init__")
        names = [f.name for f in fields]
    names = tuple(names)
    if "__dict__" in _slots_of(cls) or not set(names) <= _slots_of(cls) or len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__}: the names must be distinct slots of a class without __dict__")
    if set(names) & set(_RESERVED):
        raise TypeError(f"{cls.__name__}: a field is named like one of {_RESERVED}")
    own = cls.__dict__.get("__slots__", ())
    twin = type(f"_{cls.__name__}Twin", cls.__bases__,
                {"__slots__": own, "__setattr__": object.__setattr__, "__module__": __name__})
    probe = object.__new__(twin)
    probe.__class__ = cls        # the layouts agree (a TypeError here otherwise)
    args = ", ".join(names)
    body = "".join(f"    _obj.{n} = {n}\n" for n in names)
    src = (f"def make({args}):\n    _obj = _new(_twin)\n{body}"
           f"    _obj.__class__ = _cls\n    return _obj\n")
    env = {"_new": object.__new__, "_twin": twin, "_cls": cls}
    exec(compile(src, f"<maker of {cls.__qualname__}>", "exec"), env)
    make = env["make"]
    make.__qualname__ = make.__name__ = f"make_{cls.__name__}"
    make.__doc__ = f"A {cls.__qualname__} of ({args}), as built by llmservingsim.frozen.maker."
    return make
