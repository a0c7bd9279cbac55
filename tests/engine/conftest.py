"""Engine tests import their helpers from this folder (tests/ has no packages)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
