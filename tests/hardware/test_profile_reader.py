"""The plain-file reader of profile tables gives exactly the checked reader's rows on every
shipped bundle (it exists only for speed; the checked one names what is wrong in bad files)."""
from __future__ import annotations

import pytest

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
