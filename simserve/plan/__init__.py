"""The deployment planner: which GPU, TP×PP and number of replicas serve a workload within an SLO at the
lowest cost (docs/planner.md). `candidates` enumerates what fits in memory, `profiles` finds or writes the op
profile each GPU needs, `search` runs one capacity search per (deployment, token budget), `report` prints and
writes it.
"""
