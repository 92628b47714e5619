"""Workloads: request traces (shipped, built, or the user's files) and arrival processes."""

from simserve.workload.arrivals import PROCESSES, arrival_times
from simserve.workload.trace import Trace, load_trace

__all__ = ["PROCESSES", "Trace", "arrival_times", "load_trace"]
