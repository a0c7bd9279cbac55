"""Pipeline tests reuse the engine tests' factories (tests/ has no packages)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "engine"))
