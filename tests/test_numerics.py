"""Results independent of library versions (issue 20): simserve's own arithmetic, and pins on what libraries
still own.

The NNLS and simserve.numerics are checked against numpy/scipy for value and against themselves for
bit-exact determinism (row order, repeated runs). Two pins catch drift in what simserve still takes from
libraries, each failing with a message that names the library: the compiled tables fitted on shipped profiles
(scikit-learn's ExtraTrees) and numpy's random streams (arrivals and trace sampling).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simserve import numerics
from simserve.predictor.nnls import nnls


def _kkt_gap(x, y, w, c):
    """Largest violation of NNLS optimality: gradient ≈ 0 on positive coefficients, ≤ 0 on zero ones."""
    grad = (x * w[:, None]).T @ (y - x @ c)  # −½ ∇ of the objective
    scale = np.abs((x * w[:, None]).T @ y).max() + 1e-300
    viol = [abs(g) if ci > 0 else max(g, 0.0) for g, ci in zip(grad, c, strict=True)]
    return max(viol) / scale


def test_nnls_recovers_exact_positive_coefficients():
    t = np.arange(1.0, 4097.0, 7.0)
    x = np.c_[np.ones_like(t), t, np.ceil(t / 128) * 128]
    want = np.array([5e-6, 1e-8, 2e-8])
    y = x @ want
    got = np.array(nnls(x, y, 1.0 / y**2))
    assert np.allclose(got, want, rtol=1e-9, atol=0)


def test_nnls_clamps_a_coefficient_the_data_wants_negative():
    t = np.linspace(1, 100, 50)
    x = np.c_[np.ones_like(t), t]
    y = 10.0 - 0.05 * t  # the best unconstrained slope is negative
    c = nnls(x, y, np.ones_like(t))
    assert c[1] == 0.0 and c[0] > 0 and _kkt_gap(x, y, np.ones_like(t), np.array(c)) < 1e-9


@settings(max_examples=60)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(6, 200))
def test_nnls_is_optimal_and_independent_of_row_order(seed, cols, rows):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (rows, cols)) * 10.0 ** rng.integers(-2, 5, cols)
    y = x @ rng.normal(0, 1, cols) + rng.normal(0, 0.1, rows)
    w = rng.uniform(0.5, 2.0, rows)
    c = np.array(nnls(x, y, w))
    assert (c >= 0).all()
    assert _kkt_gap(x, y, w, c) < 1e-7
    perm = rng.permutation(rows)
    assert nnls(x[perm], y[perm], w[perm]) == tuple(c)  # bit for bit: exactly rounded sums know no order


def test_nnls_matches_scipy_on_the_optimum():
    from scipy.optimize import nnls as scipy_nnls

    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (300, 4)) * [1, 1e2, 1e4, 1e6]
    y = x @ [1.0, -0.5, 0.02, 1e-6] + rng.normal(0, 0.01, 300)
    w = np.ones(300)
    mine = np.array(nnls(x, y, w))
    theirs, _ = scipy_nnls(x, y)
    obj = lambda c: math.fsum(((x @ c - y) ** 2).tolist())  # noqa: E731
    assert obj(mine) <= obj(theirs) * (1 + 1e-9)


def test_nnls_returns_where_a_stepped_coefficient_lands_ulps_above_zero():
    """The normal equations of a generated QwQ-32B TP2 H200 profile's group (features 1, tokens, max(tokens,
    64)): the step toward the free solution left the third coefficient at 7e-15, each pass shrank it without
    reaching zero, and the active-set loop never returned. Fixing the coefficient that sets the step at zero
    ends it, at the optimum (KKT conditions on a·c = b)."""
    from simserve.predictor.nnls import _active_set

    a = [
        [0.9458268494839033, 0.21907889037729233, 0.2577787623925242],
        [0.21907889037729233, 0.31622831663157364, 0.3287463315459943],
        [0.2577787623925242, 0.3287463315459943, 0.3438343888034635],
    ]
    b = [16.60322755273177, 15.467861546007555, 16.273738571133336]
    c = _active_set(a, b)  # before the fix: no return
    grad = [b[i] - math.fsum(a[i][j] * c[j] for j in range(3)) for i in range(3)]
    assert all(ci >= 0.0 for ci in c)
    assert all(
        abs(g) < 1e-9 * max(b) if ci > 0 else g <= 1e-9 * max(b) for g, ci in zip(grad, c, strict=True)
    )


@settings(max_examples=40)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=300))
def test_percentiles_agree_with_numpy(values):
    qs = [0, 1, 50, 90, 99, 99.9, 100]
    got = numerics.percentiles(np.array(values), qs)
    want = np.percentile(np.array(values), qs)
    assert np.allclose(got, want, rtol=1e-12, atol=1e-9)


def test_percentiles_of_nothing_are_nan():
    assert all(math.isnan(v) for v in numerics.percentiles(np.array([]), [50, 99]))


def test_curve_helpers_agree_with_numpy():
    xp = numerics.log(numerics.geomspace(1.0, 2.0**30, 241))
    fp = np.sin(xp) + 3
    x = np.linspace(-5, 25, 1001)
    assert np.allclose(numerics.interp(x, xp, fp), np.interp(x, xp, fp), rtol=1e-13, atol=0)
    g = numerics.geomspace(3.0, 7e9, 50)
    assert g[0] == 3.0 and g[-1] == 7e9 and np.allclose(g, np.geomspace(3.0, 7e9, 50), rtol=1e-13)
    v = np.array([1e-9, 0.5, 1.0, 3.7, 1e12])
    assert np.allclose(numerics.exp(numerics.log(v)), v, rtol=1e-14)
    assert numerics.log2(np.array([1024.0]))[0] == 10.0


def _tables_digest(model: str, gpu: str, tp: int, pp: int) -> str:
    from simserve.predictor.load import load_timer
    from simserve.sim.scenario import Scenario

    timer = load_timer(Scenario(model=model, gpu=gpu, tp=tp, pp=pp).deployment(), cache=False)
    h = hashlib.sha256()
    for part in (*timer._tok, *timer._dec, *timer._pre, timer._tslope):
        h.update(np.asarray(part, dtype=float).tobytes())
    return h.hexdigest()[:16]


# The compiled tables of two shipped profiles, to the last bit. They depend on simserve's code and on
# scikit-learn's ExtraTrees (the ratio correction): the same under scikit-learn 1.4.2, 1.6.1 and 1.9.1.
FITTED_TABLES = {
    ("mistral-7b", "a100", 1, 1): "f435554b4f7b8b00",
    ("llama2-70b", "a40", 4, 2): "c97c9e9b169b2e22",
}


@pytest.mark.parametrize("deployment", list(FITTED_TABLES))
def test_fitted_tables_do_not_move_with_library_versions(deployment):
    import sklearn

    got = _tables_digest(*deployment)
    assert got == FITTED_TABLES[deployment], (
        f"the tables fitted on the shipped {deployment[0]} profile changed ({got}): if simserve's fit or "
        f"compile code did not change, scikit-learn {sklearn.__version__}'s ExtraTrees moved them — "
        "see docs/simulator.md § Same answers everywhere"
    )


# numpy's Generator streams that simserve draws from (arrivals, trace sampling). numpy keeps them stable but
# does not promise to; a change would move every simulated result, so it is caught here by name.
RANDOM_STREAMS = "2051724ba9d2f0ff"  # the same under numpy 1.26.4, 2.2.6 and 2.3.5


def test_numpys_random_streams_are_the_ones_results_were_recorded_with():
    rng = np.random.default_rng(20)
    h = hashlib.sha256()
    h.update(rng.exponential(0.5, 1000).tobytes())
    h.update(rng.gamma(0.25, 2.0, 1000).tobytes())
    h.update(rng.permutation(1000).astype(np.int64).tobytes())
    got = h.hexdigest()[:16]
    assert got == RANDOM_STREAMS, (
        f"numpy {np.__version__}'s random streams changed ({got}): arrivals and trace samples — and so "
        "every simulated result — differ from the recorded ones"
    )
