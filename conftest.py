"""Hypothesis settings for the whole suite (a root conftest: one in tests/ would put tests/ on
sys.path, where tests/astrasim would shadow the astrasim package).

The default profile ``ci`` is derandomized: every run of the suite draws the same examples,
so a CI failure reproduces on a developer's machine and never blames an unrelated change.
``HYPOTHESIS_PROFILE=explore`` draws fresh random examples (run it when changing an
invariant's code: it searches beyond the fixed draw); a counterexample it finds belongs in
the test as an ``@example``."""
import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
