"""HDMM's strategy optimisation for 2-D range workloads (McKenna, Miklau, Hay, Machanavajjhala, PVLDB 11(10),
2018): p-Identity strategies per axis (OPT_0) and their Kronecker product (OPT_⊗), the strategy's expected
error in closed form, and least squares through the Kronecker structure.

Notation. ``G = W^T W`` is a workload's Gram matrix; all errors below are in units of the noise variance of
one strategy answer (multiply by ``2 / ε^2`` for the Laplace mechanism at ε: every strategy here has
sensitivity 1).

**p-Identity (OPT_0).** ``A(Θ) = [I; Θ] D``, ``Θ >= 0`` of shape ``p x n``, ``D = diag(1 / (1 + 1^T Θ))``
scales every column to L1 norm 1, so ``||A||_1 = 1``. With ``d = 1 + 1^T Θ`` and
``X = (I + Θ^T Θ)^-1``, ``(A^T A)^-1 = diag(d) X diag(d)`` and the objective (the expected total squared
error of the workload, ``||A||_1^2 tr(G (A^T A)^-1)``) is

    f(Θ) = tr(G_d X),    G_d = diag(d) G diag(d).

Its gradient: ``dX = -X (dΘ^T Θ + Θ^T dΘ) X`` gives ``-2 Θ X G_d X``, and ``d`` gives ``2 (G o X) d`` in every
row (each ``d_j`` is ``1 + sum_r Θ_rj``). With ``S = I_p + Θ Θ^T`` (Woodbury: ``X = I - Θ^T S^-1 Θ``,
``Θ X = S^-1 Θ``) both cost O(n^2 p), never O(n^3): ``f = tr(G_d) - <S^-1 Θ, Θ G_d>`` and
``Θ X G_d X = S^-1 (Z - (Z Θ^T) S^-1 Θ)`` with ``Z = Θ G_d``. L-BFGS-B under the bound ``Θ >= 0``, from the paper's
random start (a fixed, public seed) and from contiguous blocks, the better kept (:func:`opt0_best`); at most
:data:`MAXITER` iterations, fewer on large grids (:func:`iterations`: an iteration costs O(n^2 p)).

**Kronecker products (OPT_⊗).** For ``A = A_y (x) A_x`` (cells in row-major order, ``iy * n + ix``),
``||A||_1 = ||A_y||_1 ||A_x||_1 = 1`` and ``(A^T A)^-1 = M_y (x) M_x`` with ``M = (A_i^T A_i)^-1``. For all
ranges, ``G = R (x) R`` (R the 1-D all-range Gram matrix), the error factorises,
``tr(R M_y) tr(R M_x)``, and each axis is one OPT_0 on ``R`` (the same on both axes of a square grid).
For rectangles ``W^T W = sum_k (cy_k cy_k^T) (x) (cx_k cx_k^T)`` (a union of Kronecker products, one term
per query; :mod:`engine.core.workload`) and the error is ``sum_k (cy_k^T M_y cy_k)(cx_k^T M_x cx_k)``:
with ``M_y`` fixed it is OPT_0 on ``G_x = sum_k c_k cx_k cx_k^T``, ``c_k = cy_k^T M_y cy_k``, and likewise
for the other axis. The axes are optimised in turn (block coordinate descent, each round warm-started
from the last) until a round improves the error by less than :data:`ROUND_TOL`.

**Least squares.** ``x_hat = (A^T A)^-1 A^T y = (A_y^+ (x) A_x^+) y``, i.e. ``X_hat = A_y^+ Y A_x^+^T`` with
``Y`` the ``(n + p) x (n + p)`` noisy answers: two small products, never the ``(n + p)^2 x n^2`` matrix.
Its covariance is ``σ^2 M_y (x) M_x``.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from ...core.workload import ALL_RANGES, RangeWorkload, all_range_gram

MAXITER = 2000  # L-BFGS-B iterations per OPT_0 (at 256 cells and p = 16 it converges in about 1,900)
WORK = 2e9  # iterations are capped at WORK / (n^2 p), at least MINITER: an iteration costs O(n^2 p)
MINITER = 50  # at 1,024 cells, p = 64: 50 iterations, about 1 s, 4 % above the converged error
# block coordinate descent stops when a round gains less than this share of the error (on 1,000 squares at 1,024
# cells the rounds after the first gain less than 0.5 % in all)
ROUND_TOL = 1e-3
MAX_ROUNDS = 8
INIT_SEED = 0  # the random start of Θ: a public constant, part of the cached strategy's key


def default_p(n: int) -> int:
    """HDMM's default number of extra rows per axis, ``n / 16`` (at least 1)."""
    return max(1, int(n) // 16)


def iterations(n: int, p: int) -> int:
    """L-BFGS-B's iteration cap for ``n`` cells and ``p`` extra rows (see :data:`WORK`)."""
    return int(max(MINITER, min(MAXITER, WORK // (n * n * p))))


# --------------------------------------------------------------------- p-Identity
def opt0_objective(theta: np.ndarray, gram: np.ndarray) -> tuple[float, np.ndarray]:
    """``f(Θ)`` and its gradient (module docstring) for ``Θ`` of shape ``(p, n)``."""
    p, n = theta.shape
    d = 1.0 + theta.sum(axis=0)
    c = cho_factor(np.eye(p) + theta @ theta.T)
    B = cho_solve(c, theta)  # S^-1 Θ
    Gd = d[:, None] * gram * d[None, :]
    Z = theta @ Gd
    f = float(np.trace(Gd) - np.sum(B * Z))
    theta_y = cho_solve(c, Z - (Z @ theta.T) @ B)  # Θ X G_d X
    gx = np.diag(gram) * d - np.sum(theta * (gram @ (B * d[None, :]).T).T, axis=0)  # (G o X) d
    return f, -2.0 * theta_y + 2.0 * gx[None, :]


def opt0(gram: np.ndarray, p: int, theta0: np.ndarray | None = None, maxiter: int | None = None) -> np.ndarray:
    """OPT_0: the p-Identity parameters ``Θ`` minimising ``f`` for the Gram matrix ``gram``."""
    n = gram.shape[0]
    maxiter = iterations(n, p) if maxiter is None else maxiter
    if theta0 is None:
        theta0 = np.random.default_rng(INIT_SEED).random((p, n))

    def fun(flat):
        f, g = opt0_objective(flat.reshape(p, n), gram)
        return f, g.ravel()

    # many small products: one BLAS thread is faster than several handing work to each other
    with threadpool_limits(1):
        res = minimize(
            fun,
            np.asarray(theta0, dtype=np.float64).ravel(),
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, None)] * (p * n),
            options={"maxiter": int(maxiter)},
        )
    return res.x.reshape(p, n)


def block_start(p: int, n: int) -> np.ndarray:
    """A start where extra row r sums the r-th of p contiguous blocks of cells (a coarser grid)."""
    theta = np.zeros((p, n))
    edges = np.linspace(0, n, p + 1).round().astype(int)
    for r in range(p):
        theta[r, edges[r] : edges[r + 1]] = 1.0
    return theta


def opt0_best(gram: np.ndarray, p: int, maxiter: int | None = None) -> np.ndarray:
    """OPT_0 from the paper's random start and from :func:`block_start`, the better kept, or the identity
    (``Θ = 0``, in the family) when neither beats it: the objective has local minima, and from the random
    start alone the optimiser can end worse than the identity (16 cells, p = 1: 1.04 times its error)."""
    n = gram.shape[0]
    found = [opt0(gram, p, None, maxiter), opt0(gram, p, block_start(p, n), maxiter), np.zeros((p, n))]
    return min(found, key=lambda t: opt0_objective(t, gram)[0])


def strategy_matrix(theta: np.ndarray) -> np.ndarray:
    """``A(Θ) = [I; Θ] D``, ``(n + p) x n``, every column of L1 norm 1."""
    n = theta.shape[1]
    return np.vstack([np.eye(n), theta]) / (1.0 + theta.sum(axis=0))[None, :]


def gram_inverse(theta: np.ndarray) -> np.ndarray:
    """``(A^T A)^-1 = diag(d) (I + Θ^T Θ)^-1 diag(d)``."""
    p, n = theta.shape
    d = 1.0 + theta.sum(axis=0)
    X = np.eye(n) - theta.T @ np.linalg.solve(np.eye(p) + theta @ theta.T, theta)
    return d[:, None] * X * d[None, :]


def pseudo_inverse(theta: np.ndarray) -> np.ndarray:
    """``A^+ = (A^T A)^-1 A^T``, ``n x (n + p)``."""
    return gram_inverse(theta) @ strategy_matrix(theta).T


# --------------------------------------------------------------------- Kronecker
def axis_terms(w: RangeWorkload, M: np.ndarray, axis: str) -> np.ndarray:
    """``c_k = cov_k^T M cov_k`` for every rectangle's coverage along ``axis`` ("x" or "y")."""
    cov = w.cx if axis == "x" else w.cy
    return np.einsum("ki,ij,kj->k", cov, M, cov, optimize=True)


def expected_error(w: RangeWorkload, theta_y: np.ndarray, theta_x: np.ndarray) -> float:
    """``tr(W^T W (A^T A)^-1)`` for ``A = A(Θ_y) (x) A(Θ_x)``: the expected total squared error of the
    workload's answers per unit noise variance (times ``2 / ε^2`` under Laplace at ε)."""
    My, Mx = gram_inverse(theta_y), gram_inverse(theta_x)
    if w.kind == ALL_RANGES:
        R = all_range_gram(w.n)
        return float(np.sum(R * My) * np.sum(R * Mx))
    return float(axis_terms(w, My, "y") @ axis_terms(w, Mx, "x"))


def optimise(w: RangeWorkload, p: int, maxiter: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """OPT_⊗ for ``w``: ``(Θ_y, Θ_x, rounds)`` (module docstring)."""
    if w.kind == ALL_RANGES:
        theta = opt0_best(all_range_gram(w.n), p, maxiter)
        return theta, theta.copy(), 1
    # start from the identity strategy on y (M_y = I): c_k = |cy_k|^2
    weights = np.einsum("ki,ki->k", w.cy, w.cy)
    theta_x = opt0_best(w.cx.T @ (weights[:, None] * w.cx), p, maxiter)
    theta_y = None
    err = np.inf
    for rounds in range(1, MAX_ROUNDS + 1):
        cx = axis_terms(w, gram_inverse(theta_x), "x")
        gy = w.cy.T @ (cx[:, None] * w.cy)
        theta_y = opt0_best(gy, p, maxiter) if theta_y is None else opt0(gy, p, theta_y, maxiter)
        cy = axis_terms(w, gram_inverse(theta_y), "y")
        theta_x = opt0(w.cx.T @ (cy[:, None] * w.cx), p, theta_x, maxiter)
        new = expected_error(w, theta_y, theta_x)
        if err - new < ROUND_TOL * new:
            return theta_y, theta_x, rounds
        err = new
    return theta_y, theta_x, MAX_ROUNDS


def kron_answers(Ay: np.ndarray, Ax: np.ndarray, X: np.ndarray) -> np.ndarray:
    """The strategy's answers ``(A_y (x) A_x) vec(X)`` as the matrix ``A_y X A_x^T``."""
    return Ay @ X @ Ax.T


def kron_least_squares(Py: np.ndarray, Px: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """``X_hat = A_y^+ Y A_x^+^T``: the least-squares cells from the answers ``Y`` (``P`` the pseudo-inverses)."""
    return Py @ Y @ Px.T
