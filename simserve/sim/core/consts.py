"""The compiled core's constants: request states, what `run` returns, invariants, event slots, codes.

Plain Python (not compiled): the core's modules read these as module globals, as core.py did when it was one
file.
"""

from __future__ import annotations

# request status (request.py)
WAITING = 0
RUNNING = 1
DONE = 2
IGNORED = 3

# what `run` returns
# a watchdog check where a rule may act: evaluate the rules, then watch() + next_check_at() or end_run()
CHECK = 1
FINISHED = 2  # the run's `finished` event was processed: the simulation is over
FAILED = 3  # an invariant broke: `error` names it
SCALE = 4  # the autoscaler's event (autoscale.py): the caller wakes it, then set_serving() + schedule_scale()

# invariants (the reference asserts the same: kvcache.py, replica.py)
INV_KV_NEGATIVE = 1
INV_KV_OVERFULL = 2
INV_SCHEDULED_TWICE = 3
INV_TIME_BACKWARDS = 4
INVARIANTS = {
    INV_KV_NEGATIVE: "free KV blocks went negative (more blocks allocated than were free)",
    INV_KV_OVERFULL: "more KV blocks were released than the pool holds",
    INV_SCHEDULED_TWICE: "a request was scheduled twice (twice in one batch, or while in flight)",
    INV_TIME_BACKWARDS: "simulated time went backwards",
}

# SimPy's priorities
URGENT = 0
NORMAL = 1
# event slots after the replicas' (replica r's stage s is slot r * pp + s; stage 0 is its scheduler loop)
SLOT_ARRIVALS = 0
SLOT_WATCHDOG = 1
SLOT_FINISHED = 2
SLOT_SCALE = 3  # the autoscaler's process, after the others (an autoscaled run only)

# what a Core runs (Core.role)
ROLE_AGGREGATED = 0
ROLE_PREFILL = 1
ROLE_DECODE = 2

# timer kinds
T_TABLES = 0  # predictor.timer.BatchTimer
T_LINEAR = 1  # testing.LinearTimer
T_CONSTANT = 2  # testing.ConstantTimer

# policies
P_FCFS = 0
P_ORCA = 1
P_VLLM = 2
P_SARATHI = 3
P_CHUNKED = 4
P_SLO = 5
P_PRESSURE = 6
P_EQUAL = 7
P_V1 = 8
P_SGLANG = 9
POLICY_CODES = {
    "fcfs": P_FCFS,
    "orca": P_ORCA,
    "vllm": P_VLLM,
    "sarathi": P_SARATHI,
    "hybrid": P_SARATHI,
    "chunked": P_CHUNKED,
    "slo-aware": P_SLO,
    "pressure": P_PRESSURE,
    "equal-cost": P_EQUAL,
    "vllm-v1": P_V1,
    "sglang": P_SGLANG,
}

PROGRESS_FLOOR = 16  # budgets.PROGRESS_FLOOR
# iteration rows kept here before they go to the IterationLog (in bulk: appending a few rows at a time to its
# arrays would reallocate and copy them again and again)
ROW_BUFFER = 65536
