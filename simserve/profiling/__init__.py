"""Profiles: op timings on one GPU for one model, as tidy CSVs with provenance (see `schema.py`)."""
