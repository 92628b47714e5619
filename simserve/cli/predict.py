"""`simserve fit PROFILE_DIR`: fit the execution-time predictor on a profile and print its held-out error."""

from __future__ import annotations

from pathlib import Path

import typer

from simserve.cli import app
from simserve.cli.console import console as make_console
from simserve.cli.options import seed_option


@app.command("fit")
def fit_command(
    profile_dir: Path = typer.Argument(..., help="A profile directory, e.g. profiles/a100-80gb/mistral-7b."),
    seed: int = seed_option("Seed of the held-out split and the tree ensembles."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Refit even when a cached fit exists."),
) -> None:
    """Fit the per-op models (cached by the profile's content hash) and print held-out MAPE per family and
    op."""
    from simserve.predictor import fit, print_report

    predictor = fit(profile_dir, seed=seed, use_cache=not no_cache)
    print_report(predictor, make_console(width=120))
