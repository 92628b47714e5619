"""One fitted model of the predictor: which profile rows it was fitted on (`ModelKey`), the model, and the
columns it reads with their profiled points (`Fitted`). fit.py makes them; coverage.py and tables.py read
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from simserve.predictor.regressor import PhysicsTimesTrees


@dataclass(frozen=True)
class ModelKey:
    """Which rows a model was fitted on. `tp` is 0 for collectives; link/num_workers only for collectives."""

    family: str
    op: str
    tp: int = 0
    link: str = ""
    num_workers: int = 0


@dataclass(frozen=True)
class Fitted:
    model: PhysicsTimesTrees
    columns: tuple[str, ...]  # the profile columns the model reads, in call order
    points: dict[str, np.ndarray]  # the distinct profiled values of each column (ranges for compile)
