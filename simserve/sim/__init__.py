"""The SimPy cluster simulator: requests → router → replicas → pipeline stages, with KV blocks and policies.

Entry points: `simulate` (arrays in, raw run out), `build_result` (tables and summary), and
`scenario.run_scenario` (everything by name, for the CLI and the capacity search). Module map:
docs/simulator.md.
"""

from simserve.sim.cluster import simulate
from simserve.sim.config import POLICY_NAMES, ROUTER_NAMES, SimConfig
from simserve.sim.metrics import SimResult, Summary, build_result

__all__ = ["POLICY_NAMES", "ROUTER_NAMES", "SimConfig", "SimResult", "Summary", "build_result", "simulate"]
