"""One error type for everything a user can get wrong, and the one way input files are read.

Bad input must stop the run with one clear message naming where the problem is (file, line,
key; or policy, program, call and simulated time), never a traceback from deep inside.
The CLI prints ``str(error)`` and exits with status 2. Every input file is read by
:func:`read_text` (whole files) or :func:`iter_lines` (streamed line by line) and parsed by
:func:`parse_yaml` / :func:`parse_json`, so a file that is not regular, too large, not UTF-8
or not parseable fails the same way wherever it is given.
"""
from __future__ import annotations

import math
import os
import stat
from contextlib import contextmanager
from typing import Any, BinaryIO, Iterator, Optional

from astrasim.errors import AstraSimError, parse_yaml as _parse_yaml


class SimError(AstraSimError):
    """A user-facing error. ``where`` is a file path (optionally with line) or a config key.
    Its fields and one-line format are astrasim's (``AstraSimError``), so the engine's errors
    and the system simulator's read the same."""


class ConfigError(SimError):
    """A configuration file or value is wrong."""


class WorkloadError(SimError):
    """A workload file is wrong."""


class ProfileError(SimError):
    """A profile bundle or hardware description is missing or malformed."""


class StuckError(SimError):
    """The simulation cannot make progress (e.g. a request that can never fit)."""


class PolicyError(SimError):
    """A user policy raised or returned an invalid decision."""


@contextmanager
def astrasim_errors() -> Iterator[None]:
    """Run a call into the system simulator: an ``astrasim`` error (astrasim depends on nothing
    of the engine, so its errors are its own classes) becomes the engine's error of the same
    name, with the same message, file, line and key, so the engine's catch sites report it as
    one line and exit 2 like any other bad input."""
    try:
        yield
    except SimError:
        raise
    except AstraSimError as exc:
        kind = {"ConfigError": ConfigError, "WorkloadError": WorkloadError,
                "StuckError": StuckError}.get(type(exc).__name__, SimError)
        raise kind(exc.message, file=exc.file, line=exc.line, key=exc.key) from None


def parse_yaml(text: str, *, file: Optional[str], error: type = ConfigError, problem: str = "invalid YAML"):
    """``yaml.safe_load(text)``; a syntax error becomes one ``error`` naming the file and the
    line where the parser stopped (the one place YAML errors are turned into user errors), as
    do a value its constructors refuse, nesting too deep for the recursive parser, and aliases
    that form a cycle or expand the document past MAX_YAML_VALUES (see ``_alias_trouble``)."""
    data = _parse_yaml(text, file=file, error=error, problem=problem, aliases=True)
    trouble = _alias_trouble(data)
    if trouble:
        raise error(f"{problem}: {trouble}", file=file)
    return data


# Aliases (*name) share one object, so a few lines can stand for billions of values ("billion
# laughs") that json.dumps or a deepcopy of the config would then build; no real config comes
# near a million values, so more than that, by way of aliases, is refused.
MAX_YAML_VALUES = 1_000_000


def _alias_trouble(root) -> Optional[str]:
    """Why ``root`` (a safe_load result) is unusable, or None: an alias cycle (``&a [*a]``), or
    aliases expanding it beyond MAX_YAML_VALUES values. Iterative (no recursion limit) and
    linear in the distinct containers: each one's expanded size is computed once, by id."""
    size: dict[int, int] = {}         # id(container) -> values in it once expanded
    open_ids: set[int] = set()        # containers whose contents are being sized (the DFS path)
    stack: list = [(root, False)]
    distinct = 0
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list)) or (not children_done and id(node) in size):
            continue
        children = list(node.values()) if isinstance(node, dict) else node
        if children_done:
            open_ids.discard(id(node))
            size[id(node)] = 1 + sum(size.get(id(c), 1) for c in children)
            distinct += 1 + sum(1 for c in children if not isinstance(c, (dict, list)))
            continue
        if id(node) in open_ids:
            return "an alias refers to a mapping or list that contains it"
        open_ids.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children)
    total = size.get(id(root), 1)
    if total > MAX_YAML_VALUES and total > distinct:
        return f"aliases expand it to {total} values (at most {MAX_YAML_VALUES})"
    return None


def finite_number(value: Any) -> bool:
    """``value`` is an int or float (not a bool) that converts to a finite float: no NaN,
    no infinity, and no JSON/YAML integer beyond float range (later float arithmetic on it
    would raise OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def parse_json(text: str, *, file: Optional[str], line: Optional[int] = None,
               error: type = WorkloadError, problem: str = "invalid JSON"):
    """``json.loads(text)``; any failure becomes one ``error`` naming the file and line (the
    one place JSON errors are turned into user errors). ``line`` is the file line of ``text``
    (one JSONL record, which may end past its newline); without it the parser's line is used.
    Besides syntax errors this catches integers beyond Python's 4300-digit conversion limit
    (a plain ValueError) and nesting deep enough to exhaust the recursion limit."""
    import json
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{problem} ({exc.msg})", file=file,
                    line=exc.lineno if line is None else line) from None
    except ValueError:
        raise error(f"{problem} (a number has too many digits)", file=file, line=line) from None
    except RecursionError:
        raise error(f"{problem} (nested too deeply)", file=file, line=line) from None


# Input files are read only through read_text / iter_lines below, so that every input file
# fails the same way: one SimError naming the file (and line), never a UnicodeDecodeError,
# a hang on a FIFO or an out-of-memory on /dev/zero.
MIB = 1 << 20
# Whole-file reads (configs, sweep specs, device/overhead YAML, model JSON) are hand-written
# or small generated files of kilobytes; 64 MiB is far above any real one and still small
# enough to hold in memory, so a larger file is a mistake (a trace given as a config), not input.
MAX_TEXT_BYTES = 64 * MIB
# Streamed files (workload JSONL, traces, profile CSVs) may be large, but one line is one
# record: the biggest real one, a request with explicit ids for a 128k-token prompt, is about
# 1 MiB of JSON, so 64 MiB bounds the memory of a file with no newline at all.
MAX_LINE_BYTES = 64 * MIB


def _open_regular(path, error: type, what: str) -> BinaryIO:
    """``path`` opened for binary reading; ``error`` if it cannot be opened or is not a
    regular file. Opened non-blocking and checked with fstat (not stat, then open), so a
    FIFO is refused without waiting for a writer and the check is of the file actually read."""
    nonblock = getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, os.O_RDONLY | nonblock)
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror}", file=str(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"cannot read {what}: not a regular file ({_file_kind(mode)})", file=str(path))
        if nonblock:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def _size(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit % MIB == 0 else f"{limit} bytes"


def _decode(data: bytes, *, file: str, first_line: int, error: type, what: str) -> str:
    """``data`` as UTF-8; ``error`` naming the line (``first_line`` + newlines before it) and
    byte column of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        raise error(f"cannot read {what}: not UTF-8 text (byte 0x{data[exc.start]:02x} at column "
                    f"{exc.start - line_start + 1})", file=file,
                    line=first_line + data.count(b"\n", 0, exc.start)) from None


def read_text(path, *, error: type = ConfigError, what: str = "file",
              limit: int = MAX_TEXT_BYTES) -> str:
    """The whole of ``path`` as UTF-8 text. Raises ``error`` (one line, naming the file) if it
    is missing or unreadable, not a regular file, larger than ``limit`` bytes, or not UTF-8
    (naming the line of the first bad byte). ``what`` names the file's role in messages:
    "cannot read {what}: ..."."""
    with _open_regular(path, error, what) as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise error(f"cannot read {what}: {exc.strerror}", file=str(path)) from None
    if len(data) > limit:
        raise error(f"cannot read {what}: larger than {_size(limit)}", file=str(path))
    return _decode(data, file=str(path), first_line=1, error=error, what=what)


def iter_lines(path, *, error: type = WorkloadError, what: str = "file",
               limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for each line of ``path`` (1-based, the line ending kept, as
    iterating a text file yields them; lines end at "\\n"). Memory is bounded by ``limit``
    bytes per line. Raises ``error`` as :func:`read_text` does, and naming the line for a
    line longer than ``limit`` or one that is not UTF-8. A generator: the file is opened,
    and errors raised, on the first ``next``."""
    with _open_regular(path, error, what) as fh:
        n = 0
        while True:
            n += 1
            try:
                raw = fh.readline(limit + 1)
            except OSError as exc:
                raise error(f"cannot read {what}: {exc.strerror}", file=str(path), line=n) from None
            if not raw:
                return
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise error(f"cannot read {what}: line longer than {_size(limit)}",
                            file=str(path), line=n)
            yield n, _decode(raw, file=str(path), first_line=n, error=error, what=what)


def load_yaml(path, *, error: type = ConfigError, what: str = "file", problem: str = "invalid YAML"):
    """The YAML file at ``path`` (:func:`read_text` then :func:`parse_yaml`): every failure,
    reading or parsing, is one ``error`` naming the file."""
    return parse_yaml(read_text(path, error=error, what=what), file=str(path), error=error, problem=problem)


def load_json(path, *, error: type = ConfigError, what: str = "file", problem: str = "invalid JSON"):
    """The JSON file at ``path`` (:func:`read_text` then :func:`parse_json`), likewise."""
    return parse_json(read_text(path, error=error, what=what), file=str(path), error=error, problem=problem)
