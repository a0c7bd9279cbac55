"""Policy axes, policy specs and candidate-class discovery for the policy search.

A *policy spec* is what a user types: a built-in NAME (``ttl``), ``FILE.py:Class``,
``FILE.py`` (the one policy class in the file) or ``pkg.module:Class``.
An *axis* is ``retention``, ``scheduling`` or ``routing``; it follows from the policy's
base class (``RetentionPolicy``, ``SchedulingPolicy``, ``RoutingPolicy`` from
``program_layer.policies``).

Discovery matches base classes by name along the MRO, so it works before a policy file has
been executed (``axis_from_source`` reads the AST, nothing runs) and after (``find_policy_class``
on a loaded module). Loading a file executes user code: only the sandboxed worker does that.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from llmservingsim.errors import ConfigError

AXES = ("retention", "scheduling", "routing")
BASE_NAMES = {"retention": "RetentionPolicy", "scheduling": "SchedulingPolicy", "routing": "RoutingPolicy"}
AXIS_OF_BASE = {name: axis for axis, name in BASE_NAMES.items()}

BUILTINS = {
    "retention": ("evict-always", "cache-lru", "ttl", "pressure-ttl", "continuum", "min-waste", "offload-ttl"),
    "scheduling": ("fcfs", "program-fcfs", "plas"),
    "routing": ("round-robin", "least-loaded", "session-affinity", "least-ect"),
}

# Seeds used when the user names none: Listing 1 (TTL, tau = 2 s), Listing 3 (PLAS), and
# round-robin for routing (the paper searches no routing axis).
DEFAULT_SEEDS = {"retention": "ttl", "scheduling": "plas", "routing": "round-robin"}


@dataclass(frozen=True)
class PolicySpec:
    """A parsed policy spec. Exactly one of ``builtin``, ``path`` or ``module`` is set.

    ``class_name`` is None when the file's single policy class is meant.
    """
    text: str
    builtin: Optional[str] = None
    path: Optional[Path] = None
    module: Optional[str] = None
    class_name: Optional[str] = None

    @property
    def is_builtin(self) -> bool:
        return self.builtin is not None

    def config_value(self) -> str:
        """The value for a config's ``policies.<axis>`` key (file paths made absolute)."""
        if self.builtin:
            return self.builtin
        if self.path is not None:
            if not self.class_name:
                raise ConfigError(f"policy file {self.path} needs a class name (FILE.py:Class)")
            return f"{self.path}:{self.class_name}"
        return f"{self.module}:{self.class_name}"


def builtin_axis(name: str) -> Optional[str]:
    for axis, names in BUILTINS.items():
        if name in names:
            return axis
    return None


def parse_policy_spec(text: str, *, base_dir: Optional[Path] = None) -> PolicySpec:
    """Parse NAME | FILE.py[:Class] | pkg.module:Class. File paths are resolved against
    ``base_dir`` (default: the current directory) and must exist."""
    text = str(text).strip()
    if not text:
        raise ConfigError("empty policy spec")
    head, sep, cls = text.rpartition(":")
    if not sep:                        # no class part: rpartition put everything in cls
        head, cls = text, ""
    if head.endswith(".py"):
        path = Path(head)
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        path = path.resolve()
        if not path.is_file():
            raise ConfigError(f"policy file not found: {head}")
        return PolicySpec(text=text, path=path, class_name=cls or None)
    if sep and cls:
        return PolicySpec(text=text, module=head, class_name=cls)
    if builtin_axis(text) is None:
        known = ", ".join(n for names in BUILTINS.values() for n in names)
        raise ConfigError(f"unknown policy '{text}' (built-ins: {known}; or FILE.py:Class)")
    return PolicySpec(text=text, builtin=text)


def axis_from_source(source: str, class_name: Optional[str] = None) -> Optional[str]:
    """The axis of ``class_name`` (or of the file's single policy class) read from the AST:
    a class whose direct base is named ``RetentionPolicy`` etc. None when the AST cannot
    tell (e.g. the class derives from another user class); SyntaxError propagates."""
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        if class_name and node.name != class_name:
            continue
        for base in node.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            if name in AXIS_OF_BASE:
                found.append((node.name, AXIS_OF_BASE[name]))
    axes = sorted({axis for _, axis in found})
    return axes[0] if len(axes) == 1 else None


def axis_of_spec(spec: PolicySpec) -> Optional[str]:
    """The axis of a spec without running user code (None if it cannot be told statically)."""
    if spec.builtin:
        return builtin_axis(spec.builtin)
    if spec.path is not None:
        try:
            return axis_from_source(spec.path.read_text(), spec.class_name)
        except SyntaxError:
            return None
    return None


def axis_of_class(cls: type) -> Optional[str]:
    """The axis whose base class appears (by name) in ``cls``'s MRO."""
    for klass in cls.__mro__[1:]:
        if klass.__name__ in AXIS_OF_BASE:
            return AXIS_OF_BASE[klass.__name__]
    return None


def load_module_from_file(path: Path, module_name: str):
    """Execute a Python file as a fresh module (registered in sys.modules so that
    dataclasses and pickling inside it work). Runs user code: call it in the worker only."""
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def find_policy_class(module, class_name: Optional[str], axis: Optional[str],
                      prefer: Optional[str] = None) -> type:
    """The policy class of ``module``: ``class_name`` if given (it must derive from the axis
    base), else the single class defined in the module that derives from the axis base
    (any axis base when ``axis`` is None); among several, the one named ``prefer`` (the
    seed's class name, which evolved files keep). Raises ConfigError naming the problem."""
    where = getattr(module, "__file__", None) or module.__name__
    if class_name:
        cls = getattr(module, class_name, None)
        if not isinstance(cls, type):
            raise ConfigError(f"{where}: no class named {class_name}")
        got = axis_of_class(cls)
        if got is None or (axis and got != axis):
            want = BASE_NAMES[axis] if axis else "a policy base class"
            raise ConfigError(f"{where}: class {class_name} does not derive from {want}")
        return cls
    candidates = []
    for name, value in vars(module).items():
        if (isinstance(value, type) and value.__module__ == module.__name__
                and value.__name__ not in AXIS_OF_BASE):
            got = axis_of_class(value)
            if got is not None and (axis is None or got == axis):
                candidates.append(name)
    if prefer in candidates:
        candidates = [prefer]
    if len(candidates) != 1:
        what = BASE_NAMES[axis] if axis else "a policy base class"
        detail = f"found {', '.join(candidates)}" if candidates else "found none"
        raise ConfigError(f"{where}: expected exactly one class deriving from {what} ({detail}); "
                          "name one with FILE.py:Class")
    return getattr(module, candidates[0])


def import_object(spec: str):
    """Resolve ``pkg.module:attr`` or ``path/to/file.py:attr`` (used for injectable runners)."""
    head, _, attr = spec.rpartition(":")
    if head.endswith(".py"):
        module = load_module_from_file(Path(head), f"_search_runner_{abs(hash(head))}")
    else:
        module = importlib.import_module(head)
    return getattr(module, attr)
