"""Test-session settings.

Hypothesis draws the same examples on every run (derandomize): a property test that passes in CI passes on
every machine, and one that fails names an example anyone can rerun. `HYPOTHESIS_PROFILE=explore` draws fresh
random examples instead, to hunt for new counterexamples locally.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
