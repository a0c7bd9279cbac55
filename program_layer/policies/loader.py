"""``load_policy``: a config's ``policies.<axis>`` entry -> a policy instance.

spec forms:
  ``NAME``                            a built-in (see ``BUILTINS``)
  ``{name: NAME, param: value, ...}`` a built-in or class reference with constructor params
  ``"path/to/file.py:Class"``         a class in a Python file (relative to ``base_dir``,
                                      the config file's folder)
  ``"pkg.module:Class"``              a class in an importable module
Every mistake raises ``ConfigError`` with key ``policies.<axis>``.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from llmservingsim.errors import ConfigError, SimError

from .base import RetentionPolicy, RoutingPolicy, SchedulingPolicy
from .builtin_retention import TTL, CacheLRU, ContinuumTTL, EvictAlways, OffloadTTL, PressureTTL
from .builtin_routing import LeastExpectedCompletion, LeastLoaded, RoundRobin, SessionAffinity
from .builtin_scheduling import FCFS, PLAS, ProgramFCFS
from .checks import is_interrupt
from .min_waste import MinWaste

__all__ = ["AXES", "BUILTINS", "load_policy", "substituted"]

AXES = {"retention": RetentionPolicy, "scheduling": SchedulingPolicy, "routing": RoutingPolicy}

BUILTINS: dict[str, dict[str, type]] = {
    "retention": {c.name: c for c in (EvictAlways, CacheLRU, TTL, PressureTTL, ContinuumTTL,
                                      MinWaste, OffloadTTL)},
    "scheduling": {c.name: c for c in (FCFS, ProgramFCFS, PLAS)},
    "routing": {c.name: c for c in (RoundRobin, LeastLoaded, SessionAffinity, LeastExpectedCompletion)},
}


# axis -> (the spec it stands in for, factory); see ``substituted``
_SUBSTITUTES: dict[str, tuple[str, Callable[[], Any]]] = {}


@contextmanager
def substituted(axis: str, spec: str, factory: Callable[[], Any]) -> Iterator[None]:
    """While active, ``load_policy(axis, spec)`` returns ``factory()`` instead of executing
    ``spec``. The policy search uses it to put a proxy for a candidate that runs in its own
    confined process (program_layer/search/proxy.py) where the spec names the candidate.
    It fails closed: any other policy asked for on ``axis`` meanwhile is refused, never
    loaded here (a spec spelled differently must not run the candidate in this process)."""
    _SUBSTITUTES[axis] = (spec.strip(), factory)
    try:
        yield
    finally:
        _SUBSTITUTES.pop(axis, None)


def load_policy(axis: str, spec: Any, *, base_dir: Path) -> Any:
    """Instantiate the policy that ``spec`` names for ``axis``."""
    if axis not in AXES:
        raise ConfigError(f"unknown policy axis {axis!r}; valid: {', '.join(AXES)}",
                          key="policies")
    key = f"policies.{axis}"
    name, params = _split_spec(spec, axis, key)
    if axis in _SUBSTITUTES:
        expected, factory = _SUBSTITUTES[axis]
        if params or name != expected:
            raise ConfigError(f"{axis} policy {name!r} asked for while the confined candidate {expected!r} "
                              "stands in on this axis; refusing to load it in this process", key=key)
        return _labelled(factory(), name)
    if ":" in name:
        cls = _load_class(name, axis, Path(base_dir), key)
    else:
        cls = BUILTINS[axis].get(name)
        if cls is None:
            raise ConfigError(f"unknown {axis} policy {name!r}; {_valid(axis)}", key=key)
        params = _checked_params(cls, params, key)
        params = _resolve_paths(cls, params, Path(base_dir))
    try:
        policy = cls(**params)
    except BaseException as exc:  # a user constructor failing (even SystemExit) is a config problem
        if isinstance(exc, SimError) or is_interrupt(exc):
            raise
        raise construction_error(axis, name, *construction_failure(exc), key=key) from None
    return _labelled(policy, name)


def construction_failure(exc: BaseException) -> tuple[str, str]:
    """(kind, text) of a policy constructor's failure: "sim" (a SimError of its own),
    "cannot" (TypeError/ValueError: wrong parameters) or "raised" (anything else). The
    search's confined candidate sends this pair back over its channel."""
    if isinstance(exc, SimError):
        return "sim", str(exc)
    if isinstance(exc, (TypeError, ValueError)):
        return "cannot", str(exc)
    return "raised", f"{type(exc).__name__}: {exc}"


def construction_error(axis: str, name: str, kind: str, text: str, *, key: str) -> ConfigError:
    """The one-line error of a constructor failure ``(kind, text)`` (``construction_failure``)."""
    if kind == "cannot":
        return ConfigError(f"cannot construct {axis} policy {name!r}: {text}", key=key)
    if kind == "raised":
        return ConfigError(f"{axis} policy {name!r} raised while constructing: {text}", key=key)
    return ConfigError(text, key=key)


def _labelled(policy: Any, name: str) -> Any:
    try:
        policy.spec_label = name
    except AttributeError:      # a class with __slots__ and no spec_label slot
        pass
    return policy


def _valid(axis: str) -> str:
    names = ", ".join(sorted(BUILTINS[axis]))
    return f"valid names: {names} (or 'path/to/file.py:Class', 'package.module:Class')"


def _split_spec(spec: Any, axis: str, key: str) -> tuple[str, dict]:
    if isinstance(spec, str):
        return spec.strip(), {}
    if isinstance(spec, dict):
        if not isinstance(spec.get("name"), str):
            raise ConfigError(f"a policy mapping needs a 'name' string; {_valid(axis)}",
                              key=key)
        params = {k: v for k, v in spec.items() if k != "name"}
        bad = [k for k in params if not isinstance(k, str)]
        if bad:
            raise ConfigError(f"parameter names must be strings, got {bad!r}", key=key)
        return spec["name"].strip(), params
    raise ConfigError(f"expected a policy name or a mapping with 'name', got "
                      f"{type(spec).__name__}; {_valid(axis)}", key=key)


def _checked_params(cls: type, params: dict, key: str) -> dict:
    if not params:          # nothing to check (and a class without __init__ would have inspect
        return params       # parse object.__init__'s text signature, compiling tokenize's regexes)
    sig = inspect.signature(cls.__init__)
    allowed = [n for n, p in sig.parameters.items() if n != "self" and p.kind in (
        p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        valid = ", ".join(allowed) if allowed else "none"
        raise ConfigError(f"unknown parameter(s) {', '.join(unknown)} for {cls.name!r}; "
                          f"valid parameters: {valid}", key=key)
    return params


def _resolve_paths(cls: type, params: dict, base_dir: Path) -> dict:
    out = dict(params)
    for name in getattr(cls, "path_params", ()):
        value = out.get(name)
        if isinstance(value, str) and not Path(value).is_absolute():
            out[name] = str(base_dir / value)
    return out


def _load_class(ref: str, axis: str, base_dir: Path, key: str) -> type:
    where, _, cls_name = ref.rpartition(":")
    if not where or not cls_name:
        raise ConfigError(f"class reference {ref!r} must be 'file.py:Class' or "
                          f"'package.module:Class'", key=key)
    if where.endswith(".py") or "/" in where or "\\" in where:
        module = _exec_file(base_dir / where if not Path(where).is_absolute() else Path(where),
                            key)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ConfigError(f"cannot import module {where!r}: {exc}", key=key) from None
    cls = getattr(module, cls_name, None)
    if not isinstance(cls, type):
        raise ConfigError(f"{where!r} has no class {cls_name!r}", key=key)
    base = AXES[axis]
    if not issubclass(cls, base):
        raise ConfigError(f"class {cls_name!r} from {where!r} is not a {base.__name__} "
                          f"(from program_layer.policies); {_valid(axis)}", key=key)
    return cls


def _exec_file(path: Path, key: str):
    """Execute a policy file as a fresh module (re-read every time: a search rewrites it)."""
    path = path.resolve()
    if not path.is_file():
        raise ConfigError(f"policy file not found: {path}", key=key)
    import hashlib
    mod_name = "_agentservesim_policy_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(mod_name, None)
        raise ConfigError(f"syntax error in policy file: {exc.msg}", file=str(path),
                          line=exc.lineno, key=key) from None
    except BaseException as exc:        # SystemExit at import too; a real Ctrl-C passes
        sys.modules.pop(mod_name, None)
        if is_interrupt(exc):
            raise
        raise ConfigError(f"policy file raised while loading: {type(exc).__name__}: {exc}",
                          file=str(path), key=key) from None
    return module
