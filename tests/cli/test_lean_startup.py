"""Start-up imports only what the chosen command needs (issue 15): a command's own modules,
never the search package, plotting, scipy or networkx unless it uses them."""
from __future__ import annotations

import subprocess
import sys

import pytest

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]

HEAVY = ("numpy", "yaml", "networkx", "matplotlib", "scipy", "openevolve", "program_layer.search", "google.protobuf")


def imported_after(argv: list[str], watch: tuple = HEAVY) -> set[str]:
    """The ``watch``ed modules that ``agentservesim ARGV`` loaded beyond what the interpreter
    had at start-up (site and .pth files), run in-process in a fresh interpreter."""
    code = ("import sys, contextlib, io\n"
            "before = set(sys.modules)\n"
            "from program_layer.cli import main\n"
            f"sys.argv = ['agentservesim'] + {argv!r}\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            "        main()\n"
            "    except SystemExit:\n"
            "        pass\n"
            f"print(','.join(m for m in {watch!r} if m in sys.modules and m not in before))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                         check=True).stdout.rstrip("\n").split("\n")[-1]
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


# What a run reading a JSONL workload on a measured bundle never needs: the installed metadata
# (importlib.metadata and the email package), workload statistics, policy-file hashing, the
# exact ring closed form, KV tiers, and the derivation's or synthesis's reader.
NOT_ON_A_RUN = ("importlib.metadata", "email", "statistics", "hashlib", "fractions", "llmservingsim.kv_tiers",
                "llmservingsim.synthesize_bundle")


def test_the_dev_cell_run_imports_only_what_it_uses(tmp_path):
    cell = "examples/validation/RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10.yaml"
    assert imported_after(["run", cell, "--quiet", "--out", str(tmp_path / "out")], NOT_ON_A_RUN) == set()
