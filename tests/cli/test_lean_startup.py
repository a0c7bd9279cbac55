"""Start-up imports only what the chosen command needs (issue 15): a command's own modules,
never the search package, plotting, scipy or networkx unless it uses them."""
from __future__ import annotations

import subprocess
import sys

import pytest

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]

HEAVY = ("numpy", "yaml", "networkx", "matplotlib", "scipy", "openevolve", "program_layer.search", "google.protobuf")


def imported_after(argv: list[str]) -> set[str]:
    """The heavy modules loaded by ``agentservesim ARGV`` (run in-process in a fresh interpreter)."""
    code = ("import sys, contextlib, io\n"
            "from program_layer.cli import main\n"
            f"sys.argv = ['agentservesim'] + {argv!r}\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            "        main()\n"
            "    except SystemExit:\n"
            "        pass\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                         check=True).stdout.strip().splitlines()[-1]
    return set(filter(None, out.split(",")))


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["sweep", "--help"], ["validate", "--help"],
                                  ["replay", "--help"], ["export-chakra", "--help"]])
def test_help_imports_nothing_heavy(argv):
    assert imported_after(argv) <= {"yaml"}


def test_search_help_imports_its_own_package_but_not_openevolve():
    assert imported_after(["search", "--help"]) <= {"yaml", "program_layer.search"}


def test_a_run_on_the_default_network_does_not_import_networkx_or_the_search(tmp_path):
    loaded = imported_after(["run", "examples/quickstart.yaml", "--quiet", "--out", str(tmp_path / "out")])
    assert {"numpy", "yaml"} <= loaded      # what a run needs (protobuf only writes Chakra files)
    assert not loaded & {"networkx", "matplotlib", "scipy", "openevolve", "program_layer.search", "google.protobuf"}
