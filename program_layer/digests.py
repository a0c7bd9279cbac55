"""Content digests of files: what a cache key, a calibration file or a replay record uses to
say "this exact file" (sha256, hex). One place, read in 1 MiB blocks so a large workload or
trace is never loaded whole just to be hashed."""
from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1 << 20


def file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(Path(path), "rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
