"""The progress helper: draws only when enabled (a TTY and not quiet)."""
from __future__ import annotations

import io

from program_layer.sweep.progress import progress


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_quiet_or_not_a_tty_writes_nothing():
    for stream, quiet in ((io.StringIO(), False), (FakeTTY(), True)):
        assert list(progress([1, 2, 3], "x", quiet=quiet, stream=stream)) == [1, 2, 3]
        with progress(3, "y", quiet=quiet, stream=stream) as bar:
            bar.update(3)
        assert stream.getvalue() == ""


def test_tty_draws_bar_and_ends_line():
    stream = FakeTTY()
    bar = progress(4, "sweep", stream=stream, min_interval_s=0.0)
    bar.update(note="cell 1 ok")
    assert bar.render().startswith("sweep: [######..................] 1/4  25% ")
    assert bar.render().endswith("  cell 1 ok")
    bar.update(3)
    bar.close()
    bar.close()  # idempotent
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "4/4 100%" in text.splitlines()[-1].split("\r")[-1]


def test_iterable_without_len_counts_up():
    stream = FakeTTY()
    items = list(progress((i for i in range(5)), "gen", stream=stream, min_interval_s=0.0))
    assert items == [0, 1, 2, 3, 4]
    assert stream.getvalue().rstrip("\n").split("\r")[-1].startswith("gen: 5 ")
