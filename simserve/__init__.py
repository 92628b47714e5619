"""simserve: a discrete-event simulator and token-budget tuner for LLM inference serving."""

__version__ = "0.1.0"
