"""Tuning: capacity search (`capacity.py`), cached probes (`probe.py`), sweeps over policies and budgets
(`sweep.py`, run by `executors.py` in local processes or on Ray), plots and the capacity regression check."""
