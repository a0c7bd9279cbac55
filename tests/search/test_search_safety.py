"""The static candidate check rejects what could reach past the evaluator, accepts policies."""
from __future__ import annotations

from pathlib import Path

import pytest

from program_layer.search.safety import UnsafeCandidate, check_policy_file

REPO = Path(__file__).resolve().parents[2]
HEADER = "from program_layer.policies import RetentionPolicy\nclass P(RetentionPolicy):\n    def on_turn_complete(self, pcb, request_id, now):\n"


@pytest.mark.parametrize("listing", sorted((REPO / "examples" / "policies").glob("*.py")))
def test_paper_listings_pass(listing):
    check_policy_file(listing)


@pytest.mark.parametrize("body, why", [
    ("import sys\n" + HEADER + "        return sys._getframe(1)\n", "import of 'sys'"),
    ("import gc\n" + HEADER + "        return 'release'\n", "import of 'gc'"),
    (HEADER + "        return ().__class__.__base__.__subclasses__()\n", "attribute '__"),
    (HEADER + "        return getattr(pcb, 'x')\n", "call of 'getattr'"),
    (HEADER + "        open('/tmp/x', 'w').write('1')\n        return 'release'\n", "call of 'open'"),
    (HEADER + "        return eval('1')\n", "call of 'eval'"),
    ("from os import _exit\n" + HEADER + "        return 'release'\n", "import from 'os'"),
    (HEADER + "        return __builtins__\n", "name '__builtins__'"),
    ("from .x import y\n" + HEADER + "        return 'release'\n", "import from"),
])
def test_escapes_are_rejected_with_the_line(tmp_path, body, why):
    f = tmp_path / "cand.py"
    f.write_text(body)
    with pytest.raises(UnsafeCandidate, match="line") as err:
        check_policy_file(f)
    assert why in str(err.value)
