"""A cell that kills its worker process fails alone on the local executor (the pool breaks
for every cell it holds; those are retried in isolation)."""
from __future__ import annotations

import os
import time

from program_layer.sweep.executors import ExecutorFailure, LocalExecutor


def crash_on_one(x: int) -> int:
    if x == 1:
        time.sleep(0.2)
        os._exit(3)
    time.sleep(0.5)
    return x * 10


def test_one_crashing_cell_fails_alone():
    ex = LocalExecutor(2)
    try:
        results = dict(ex.run(crash_on_one, [0, 1, 2, 3]))
    finally:
        ex.close()
    assert isinstance(results[1], ExecutorFailure) and "crashed" in results[1].message
    assert {k: v for k, v in results.items() if k != 1} == {0: 0, 2: 20, 3: 30}
