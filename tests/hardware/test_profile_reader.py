"""The plain-file reader of profile tables gives exactly the checked reader's columns on every
shipped bundle (it exists only for speed; the checked one names what is wrong in bad files)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from llmservingsim import profiles
from llmservingsim.paths import profiles_dir

TP_DIRS = sorted(p for p in profiles_dir().rglob("tp*") if p.is_dir())


def _bundle_args(tp_dir):
    parts = tp_dir.relative_to(profiles_dir()).parts      # HW / org / model / variant / tpN
    return parts[0], "/".join(parts[1:3]), int(parts[4][2:]), parts[3]


@pytest.mark.parametrize("tp_dir", TP_DIRS, ids=lambda p: str(p.relative_to(profiles_dir())))
def test_plain_and_checked_readers_agree_on_shipped_tables(tp_dir, monkeypatch):
    calls = []
    real = profiles._read_csv

    def record(path, required, **kw):
        calls.append((path, required, kw))
        return real(path, required, **kw)

    monkeypatch.setattr(profiles, "_read_csv", record)
    monkeypatch.setattr(profiles, "_CACHE", {})
    hw, model, tp, variant = _bundle_args(tp_dir)
    profiles.load_bundle(hw, model, tp, variant)
    assert calls
    for path, required, kw in calls:
        text, signed = kw.get("text", ("layer",)), kw.get("signed", ())
        plain = profiles._read_plain_csv(path, required, text, signed)
        assert plain is not None, f"{path} is not read by the fast path"
        assert plain == profiles._read_checked_csv(path, required, text, signed)


_NUMBER = st.one_of(st.sampled_from(["0", "16", "16.0", "2048", "1e3", "-0", "-1.5", "nan", "inf", "x", ""]),
                    st.floats(allow_nan=False, allow_infinity=False).map(repr))


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["qkv", "o_proj"]), _NUMBER, _NUMBER, _NUMBER), max_size=40),
       crlf=st.booleans(), blank=st.booleans(), drop=st.integers(min_value=-1, max_value=40))
def test_the_plain_reader_gives_the_checked_readers_columns_or_steps_aside(tmp_path_factory, rows, crlf,
                                                                           blank, drop):
    """On any table (repeated and bad numbers, a row short of a field, blank lines, CRLF) the
    fast reader's columns are exactly the checked reader's, or it returns None and the checked
    reader decides (and names the bad line)."""
    lines = ["layer,tokens,extra,time_us"] + [",".join(r) for r in rows]
    if 0 <= drop < len(rows):
        lines[drop + 1] = lines[drop + 1].rsplit(",", 1)[0]     # a row one field short
    if blank and rows:
        lines.insert(len(lines) // 2 + 1, "")
    path = tmp_path_factory.mktemp("t") / "dense.csv"
    path.write_bytes(("\r\n" if crlf else "\n").join(lines).encode() + b"\n")
    required, text, signed = ("layer", "tokens", "time_us"), ("layer",), ("tokens",)
    plain = profiles._read_plain_csv(path, required, text, signed)
    try:
        checked = profiles._read_checked_csv(path, required, text, signed)
    except profiles.ProfileError:
        assert plain is None
        return
    assert plain == checked
