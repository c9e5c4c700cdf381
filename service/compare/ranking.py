"""Pairwise dominance and the global ranking of Wan et al. (2022, §3.4, Eq. 7, Algorithms 1–2), numpy only.

``p`` [m, m]: p[i, j] is the score (CIDEr, SPICE, ...) of model i on the pairwise set D_{i,j}; its diagonal
is never read. F[i, j] = p[i, j] / p[j, i] is the dominance of i over j, and the ranking vector q of
Eq. 7 is the Cesàro mean of the normalised powers F^α 1 / 1ᵀ F^α 1, which for a positive F equals the
Perron vector (normalised to sum 1). Higher q is better.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from service.checks import above


def _square(name: str, a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty square matrix, got shape {a.shape}")
    return a


def dominance_matrix(p: np.ndarray, floor: float = 1e-3) -> np.ndarray:
    """F [m, m] with F[i, j] = max(p[i, j], floor) / max(p[j, i], floor) and F[i, i] = 1, so that
    F[i, j] · F[j, i] = 1. The ``floor`` keeps F finite and positive when a model scores 0 on a pairwise
    set (p[j, i] = 0 would give inf, p[i, j] = 0 a zero that breaks positivity); it should sit below any
    meaningful score. ``p`` off the diagonal must be finite and ≥ 0."""
    p = _square("p", p)
    above(0, floor=floor)
    off = ~np.eye(p.shape[0], dtype=bool)
    if not np.all(np.isfinite(p[off])) or np.any(p[off] < 0):
        raise ValueError("p must be finite and non-negative off the diagonal")
    clipped = np.maximum(np.where(off, p, 1.0), floor)
    return np.where(off, clipped / clipped.T, 1.0)


def _power(F: np.ndarray, tol: float, max_iter: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Power iteration v ← F v / 1ᵀ F v from v = 1/m; returns (converged v, Cesàro mean of the iterates
    F^α 1 / 1ᵀ F^α 1 for α = 1..t, t). Stops when max |Δv| ≤ tol."""
    F = _square("F", F)
    if not np.all(np.isfinite(F)) or np.any(F <= 0):
        raise ValueError("F must be finite and strictly positive")
    v = np.full(F.shape[0], 1.0 / F.shape[0])
    total = np.zeros_like(v)
    for t in range(1, max_iter + 1):
        w = F @ v
        w /= w.sum()
        total += w
        if np.max(np.abs(w - v)) <= tol:
            return w, total / t, t
        v = w
    raise RuntimeError(f"power iteration did not converge to {tol} in {max_iter} iterations")


def perron_vector(F: np.ndarray, tol: float = 1e-13, max_iter: int = 100_000) -> tuple[np.ndarray, float]:
    """Eq. 7: (q [m], sum 1, λ = 1ᵀ F q / 1ᵀ q) for a positive F [m, m]. For a positive F the normalised
    powers converge to the Perron vector, hence so does their Cesàro mean; q is the converged iterate
    (the running Cesàro mean only approaches it as O(1/t); see ``perron_check``)."""
    q, _, _ = _power(F, tol, max_iter)
    q = q / q.sum()
    return q, _eigenvalue(F, q)


def _eigenvalue(F: np.ndarray, q: np.ndarray) -> float:
    return float(np.sum(np.asarray(F, dtype=np.float64) @ q) / q.sum())


def perron_check(F: np.ndarray) -> dict[str, float]:
    """Check ``perron_vector`` against ``numpy.linalg.eig``: ``lambda_power``, ``lambda_eig`` (eigenvalue
    of largest real part), ``residual`` = max |F q − λ q|, ``max_abs_diff`` between q and the eig
    eigenvector normalised to sum 1, and ``cesaro_gap`` = max |running Cesàro mean − q| at the stop."""
    F = _square("F", F)
    q, cesaro, _ = _power(F, 1e-13, 100_000)
    q = q / q.sum()
    lam = _eigenvalue(F, q)
    values, vectors = np.linalg.eig(F)
    k = int(np.argmax(values.real))
    u = vectors[:, k].real
    u = u / u.sum()
    return {
        "lambda_power": lam,
        "lambda_eig": float(values[k].real),
        "residual": float(np.max(np.abs(F @ q - lam * q))),
        "max_abs_diff": float(np.max(np.abs(q - u))),
        "cesaro_gap": float(np.max(np.abs(cesaro - q))),
    }


def ranking(q: np.ndarray, names: Sequence[str]) -> list[str]:
    """``names`` [m] best first: descending q [m], ties by name."""
    q = np.asarray(q, dtype=np.float64)
    if q.shape != (len(names),):
        raise ValueError(f"q has shape {q.shape}, names has {len(names)} entries")
    return [names[i] for i in sorted(range(len(names)), key=lambda i: (-q[i], names[i]))]


def extend_scores(p: np.ndarray, new_row: Sequence[float], new_col: Sequence[float]) -> np.ndarray:
    """Algorithm 2: the [m+1, m+1] score matrix with a new model m. ``new_row[i]`` = p[m, i], the new
    model's score on D_{i,new}; ``new_col[i]`` = p[i, m], model i's score on D_{i,new}. The old [m, m]
    block is copied unchanged; the new diagonal entry (never read) is 0."""
    p = _square("p", p)
    row, col = np.asarray(new_row, dtype=np.float64), np.asarray(new_col, dtype=np.float64)
    m = p.shape[0]
    if row.shape != (m,) or col.shape != (m,):
        raise ValueError(f"new_row and new_col must have shape ({m},), got {row.shape} and {col.shape}")
    out = np.zeros((m + 1, m + 1))
    out[:m, :m] = p
    out[m, :m] = row
    out[:m, m] = col
    return out


def _average_ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    sorted_x = x[order]
    start = 0
    for end in range(1, len(x) + 1):
        if end == len(x) or sorted_x[end] != sorted_x[start]:
            ranks[order[start:end]] = (start + end + 1) / 2.0  # mean of the 1-based ranks start+1..end
            start = end
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson correlation of the average ranks (ties share the mean of
    their ranks). nan when either input is constant (its ranks have no variance, so the correlation is
    undefined). ValueError when the lengths differ, are < 2, or a value is NaN."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or len(x) < 2:
        raise ValueError(f"a and b must be 1-D of equal length >= 2, got {x.shape} and {y.shape}")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("a and b must not contain NaN")
    rx, ry = _average_ranks(x), _average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = float(np.sqrt(np.sum(rx * rx) * np.sum(ry * ry)))
    if denom == 0.0:
        return float("nan")
    return float(np.sum(rx * ry) / denom)


def rank_stability(p_by_k: Mapping[int, np.ndarray], floor: float = 1e-3) -> dict[int, float]:
    """Fig. 10: for each k, Spearman between the Perron vector from ``p_by_k[k]`` [m, m] and the one from
    the largest k (which scores 1.0 unless its q is constant)."""
    if not p_by_k:
        raise ValueError("p_by_k must not be empty")
    q = {k: perron_vector(dominance_matrix(p, floor))[0] for k, p in p_by_k.items()}
    ref = q[max(q)]
    return {k: spearman(q[k].tolist(), ref.tolist()) for k in sorted(q)}
