"""``llmservingsim.frozen.maker`` builds exactly what the class's own constructor builds
(issue 15: the per-call records are made through it)."""
from __future__ import annotations

import dataclasses
import pickle
from typing import Optional

import pytest
from hypothesis import given, settings, strategies as st

from hooks import CallInfo, KVEntryInfo, RetentionDecision
from llmservingsim.cluster import FinishedCall, InstanceLoad
from llmservingsim.frozen import maker
from program_layer.orchestrator import CallRecord
from program_layer.pcb import PCBView, _new_view
from program_layer.policies.base import Signals
from program_layer.retention import EntryView, _entry_fields, _new_entry_view

RECORDS = (InstanceLoad, FinishedCall, CallInfo, RetentionDecision, CallRecord, Signals, KVEntryInfo)
_value = st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=4), st.booleans())


def _same(a, b, names) -> None:
    assert type(a) is type(b)
    for n in names:
        x, y = getattr(a, n), getattr(b, n)
        assert type(x) is type(y) and (x == y or x is y), n


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_maker_equals_the_dataclass_constructor(cls, data):
    names = [f.name for f in dataclasses.fields(cls)]
    values = data.draw(st.tuples(*[_value] * len(names)))
    made, built = maker(cls)(*values), cls(*values)
    _same(made, built, names)
    assert made == built and repr(made) == repr(built) and hash(made) == hash(built)
    assert pickle.loads(pickle.dumps(made)) == built
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, names[0], 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(made, names[-1])


@settings(max_examples=40, deadline=None)
@given(values=st.tuples(*[_value] * len(PCBView.__slots__)))
def test_view_maker_equals_the_keyword_constructor(values):
    kw = {n.lstrip("_"): v for n, v in zip(PCBView.__slots__, values)}
    made, built = _new_view(*values), PCBView(**kw)
    _same(made, built, PCBView.__slots__)
    with pytest.raises(AttributeError, match="read-only"):
        made.program_id = 1


@settings(max_examples=40, deadline=None)
@given(owner=st.integers(0, 9), created=st.integers(0, 10**12), deadline=st.integers(0, 10**12),
       now=st.integers(0, 10**12), value=st.one_of(st.none(), st.floats(allow_nan=False)),
       tier=st.sampled_from(["gpu", "cpu"]), program=st.none() | st.just("p"))
def test_entry_view_maker_equals_the_constructor(owner, created, deadline, now, value, tier, program):
    entry = KVEntryInfo(owner=owner, instance=1, created_ns=created, deadline_ns=deadline,
                        value=value, num_blocks=3, seq=7, tier=tier)
    made = _new_entry_view(*_entry_fields(entry, now, program))
    _same(made, EntryView(entry, now, program), EntryView.__slots__)
    with pytest.raises(AttributeError, match="read-only"):
        made.owner = 1


def test_maker_refuses_classes_whose_constructor_does_more():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Post:
        a: int

        def __post_init__(self):
            pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class NoInit:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    class Plain:
        __slots__ = ("a",)

    for cls in (Post, NoInit, NoSlots):
        with pytest.raises(TypeError):
            maker(cls)
    with pytest.raises(TypeError):
        maker(Plain)                    # not a dataclass: names required
    with pytest.raises(TypeError):
        maker(Plain, ("a", "b"))        # b is no slot
    assert maker(Plain, ("a",))(5).a == 5


def test_maker_keeps_optional_fields_as_given():
    info = maker(CallInfo)(1, 2, 3, 4, 5, 6, None, None, 0)
    assert info == CallInfo(1, 2, 3, 4, 5, 6) and info.first_scheduled_ns is None
    load: Optional[InstanceLoad] = maker(InstanceLoad)(1, 2, 0.5, 3, 4, 0, 0)
    assert load == InstanceLoad(1, 2, 0.5, 3, 4)
