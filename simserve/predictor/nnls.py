"""Non-negative weighted least squares for the physics baselines, in arithmetic simserve controls.

The baseline of every op family (regressor.py) is a non-negative linear model on at most five physics columns.
It used to be fitted by scikit-learn's `LinearRegression(positive=True)`, which calls scipy's NNLS; scipy
rewrote that solver between releases and its coefficients moved in the last digits, which moved the trees
fitted on the ratio measured / baseline, which moved simulated results (pipeline-parallel digests differed
between machines with other scipy versions). With five columns the whole problem is the 5×5 weighted normal
equations, so it is solved here in plain Python floats:

- every sum goes through `math.fsum` (exactly rounded, so independent of summation order, SIMD and BLAS);
- products are numpy elementwise multiplies (each one IEEE-rounded, identical on every numpy and CPU);
- columns are scaled by powers of two (exact) so the normal matrix has a unit-order diagonal;
- the active set of Lawson & Hanson (1974, ch. 23) picks which coefficients are free, and each free subsystem
  is solved by Gaussian elimination with partial pivoting, refined once against the exact-sum residual.

The answer then depends only on the data: the same profile gives the same coefficients on any machine of the
same float format.
"""

from __future__ import annotations

import math

import numpy as np

_MAX_PASSES = 64  # active-set changes; a 5-column problem needs a handful
# A pivot this small, on a matrix whose diagonal was scaled into [1/4, 1), is a direction the data does not
# determine (collinear columns): it gets coefficient 0 rather than a huge one.
_SINGULAR = 1e-12


def nnls(x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> tuple[float, ...]:
    """argmin over c ≥ 0 of Σ weight·(x @ c − y)², for x of shape (rows, columns ≤ ~8)."""
    x = np.asarray(x, dtype=float)
    y, weight = np.asarray(y, dtype=float), np.asarray(weight, dtype=float)
    n = x.shape[1]
    wx = [x[:, j] * weight for j in range(n)]
    a = [[math.fsum((wx[i] * x[:, j]).tolist()) for j in range(n)] for i in range(n)]
    b = [math.fsum((wx[i] * y).tolist()) for i in range(n)]
    # Power-of-two scaling: exact, and it keeps columns of very different magnitude (1 vs FLOPs) comparable.
    scale = [math.ldexp(1.0, -math.frexp(math.sqrt(a[j][j]))[1]) if a[j][j] > 0 else 1.0 for j in range(n)]
    a = [[a[i][j] * scale[i] * scale[j] for j in range(n)] for i in range(n)]
    b = [b[i] * scale[i] for i in range(n)]
    c = _active_set(a, b)
    return tuple(c[j] * scale[j] for j in range(n))


def _active_set(a: list[list[float]], b: list[float]) -> list[float]:
    """Lawson–Hanson NNLS on the normal equations a·c = b (a symmetric positive semi-definite)."""
    n = len(b)
    tol = 1e-12 * max(max((abs(v) for v in b), default=0.0), 1e-300)
    c = [0.0] * n
    free: list[int] = []
    for _ in range(_MAX_PASSES):
        grad = _residual(a, b, c)
        candidates = [j for j in range(n) if j not in free and grad[j] > tol]
        if not candidates:
            break
        # Ties go to the lowest column, deterministically.
        free.append(max(candidates, key=lambda j: (grad[j], -j)))
        free.sort()
        while free:
            z = _solve_free(a, b, free)
            if all(z[j] > 0.0 for j in free):
                c = z
                break
            # Step from c toward z until the first free coefficient reaches zero, then fix it at zero.
            # NOTE: the coefficient that sets the step is fixed at exactly zero, as Lawson and Hanson do: the
            # stepped value can be left a few ulps above it (7e-15 on a generated QwQ-32B profile), and each
            # further pass then shrank it without ever reaching zero, until alpha underflowed and the loop
            # spun forever. Fixing it guarantees one fewer free column per pass.
            alpha, blocking = min((c[j] / (c[j] - z[j]), j) for j in free if z[j] <= 0.0)
            c = [c[j] + alpha * (z[j] - c[j]) for j in range(n)]
            c[blocking] = 0.0
            free = [j for j in free if c[j] > 0.0]
            c = [c[j] if j in free else 0.0 for j in range(n)]
    return c


def _residual(a: list[list[float]], b: list[float], c: list[float]) -> list[float]:
    return [math.fsum([b[i], *(-a[i][j] * c[j] for j in range(len(c)))]) for i in range(len(b))]


def _solve_free(a: list[list[float]], b: list[float], free: list[int]) -> list[float]:
    """The unconstrained solution on the free columns (zeros elsewhere), refined once."""
    sub = [[a[i][j] for j in free] for i in free]
    rhs = [b[i] for i in free]
    z = _gauss(sub, rhs)
    r = _residual(sub, rhs, z)
    dz = _gauss(sub, r)
    z = [zi + di for zi, di in zip(z, dz, strict=True)]
    out = [0.0] * len(b)
    for k, j in enumerate(free):
        out[j] = z[k]
    return out


def _gauss(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting; a singular direction gets coefficient 0."""
    n = len(b)
    m = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    for k in range(n):
        p = max(range(k, n), key=lambda i: (abs(m[i][k]), -i))
        m[k], m[p] = m[p], m[k]
        if abs(m[k][k]) < _SINGULAR:
            continue
        for i in range(k + 1, n):
            f = m[i][k] / m[k][k]
            if f:
                m[i] = [m[i][j] - f * m[k][j] for j in range(n + 1)]
    z = [0.0] * n
    for k in range(n - 1, -1, -1):
        if abs(m[k][k]) < _SINGULAR:
            continue
        z[k] = math.fsum([m[k][n], *(-m[k][j] * z[j] for j in range(k + 1, n))]) / m[k][k]
    return z
