"""Single writers (style.md habit 5): each guarded field is assigned only in its owner module."""
from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]
OWNERS = {
    r"\.ref_cnt\s*[-+]?=(?!=)": {"llmservingsim/block_pool.py"},
    r"\.free_run\s*=(?!=)": {"llmservingsim/block_pool.py"},
    r"\.(entry_refs|entry_only)\s*[-+]?=(?!=)": {"llmservingsim/block_pool.py"},
    r"\.status\s*=(?!=)": {"llmservingsim/scheduler.py", "llmservingsim/request.py"},
    r"\.num_computed_tokens\s*[-+]?=(?!=)": {"llmservingsim/scheduler.py", "llmservingsim/request.py"},
    r"\.num_tokens\s*[-+]?=(?!=)": {"llmservingsim/scheduler.py", "llmservingsim/request.py"},
    r"\.num_placeholders\s*[-+]?=(?!=)": set(),        # a property of the two counts
    r"\.num_known_tokens\s*[-+]?=(?!=)": {"llmservingsim/scheduler.py", "llmservingsim/request.py"},
    r"\.req_blocks\[[^\]]+\]\s*=|\.req_blocks\[[^\]]+\]\.extend": {"llmservingsim/kv_cache_manager.py"},
}


def test_guarded_fields_have_one_writer_module():
    files = [p for d in ("llmservingsim", "program_layer", "hooks") for p in (SRC / d).rglob("*.py")]
    for pattern, owners in OWNERS.items():
        writers = {str(p.relative_to(SRC)) for p in files if re.search(pattern, p.read_text())}
        assert writers <= owners, (pattern, writers - owners)
