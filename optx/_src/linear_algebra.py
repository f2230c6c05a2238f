"""Linear algebra for optimizers: power iteration, inverse matrix roots, non-negative least squares.

Each runs as one compiled loop (`jax.lax.while_loop` or `jax.lax.scan`) and works under
`jax.jit`.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from optx._src import reprs
from optx._src.tree import scale, sub
from optx._src.tree_reduce import norm, vdot

PyTree = Any


def global_norm(updates: PyTree) -> jax.Array:
    """The 2-norm of a tree seen as one vector. Deprecated: use `optx.tree.norm`.

    Warns:
      DeprecationWarning: on every call, naming `optx.tree.norm`.

    Example:
      >>> import warnings, jax.numpy as jnp, optx
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore", DeprecationWarning)
      ...     print(float(optx.global_norm({"a": jnp.array([3.0, 4.0])})))
      5.0
    """
    warnings.warn(
        "optx.global_norm is deprecated in favor of optx.tree.norm",
        DeprecationWarning,
        stacklevel=2,
    )
    return norm(updates)


def _normalized(v: PyTree) -> PyTree:
    return scale(1.0 / norm(v), v)


def power_iteration(
    matrix: ArrayLike | Callable[[PyTree], PyTree],
    *,
    v0: PyTree | None = None,
    num_iters: ArrayLike = 100,
    error_tolerance: ArrayLike = 1e-6,
    precision: lax.Precision = lax.Precision.HIGHEST,
    key: jax.Array | None = None,
) -> tuple[jax.Array, PyTree]:
    r"""The dominant eigenvalue of a matrix and its eigenvector, by power iteration.

    .. math::
      v_{k+1} = \frac{A v_k}{\|A v_k\|}, \qquad \lambda_k = v_k^\top A v_k

    stopping when :math:`\|A v_k - \lambda_k v_k\| / |\lambda_k|` falls below
    ``error_tolerance``, or after ``num_iters`` products.

    Args:
      matrix: a square matrix, or a function computing the product :math:`A v` of a
        (pytree) vector.
      v0: the starting vector (required for a function; for a matrix, by default uniform
        in :math:`[-1, 1]` drawn with ``key``).
      num_iters: the largest number of iterations.
      error_tolerance: the relative residual at which to stop.
      precision: the precision of the matrix products (`jax.lax.Precision`).
      key: the key for the default ``v0`` (``jax.random.PRNGKey(0)`` if ``None``).

    Returns:
      ``(eigenvalue, eigenvector)``, the eigenvector of unit 2-norm.

    Raises:
      ValueError: ``matrix`` is a function and ``v0`` is ``None``, or ``matrix`` is not
        a square matrix.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> value, vector = optx.power_iteration(jnp.array([[2.0, 0.0], [0.0, 1.0]]))
      >>> round(float(value), 4)
      2.0

    References:
      von Mises and Pollaczek-Geiringer, `Praktische Verfahren der Gleichungsauflösung
      <https://doi.org/10.1002/zamm.19290090206>`_, ZAMM 1929.
    """
    api = "optx.power_iteration"
    if callable(matrix):
        product = matrix
        if v0 is None:
            raise ValueError(
                f"`{api}` needs v0 when matrix is a function (the vector's structure is "
                f"unknown). Received: v0=None."
            )
    else:
        matrix = jnp.asarray(matrix)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ValueError(
                f"`{api}` needs a square matrix. Received: matrix of shape {matrix.shape}."
            )

        def product(v: jax.Array) -> jax.Array:
            return jnp.matmul(matrix, v, precision=precision)

        if v0 is None:
            key = jax.random.PRNGKey(0) if key is None else key
            v0 = jax.random.uniform(key, matrix.shape[-1:], matrix.dtype, minval=-1.0, maxval=1.0)

    def going(carry: tuple[Any, ...]) -> jax.Array:
        v, z, value, i = carry
        residual = norm(sub(z, scale(value, v)))
        return ~(jnp.abs(residual / value) < error_tolerance) & (i < num_iters)

    def step(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        _, z, _, i = carry
        v = _normalized(z)
        z = product(v)
        return v, z, vdot(v, z), i + 1

    v = _normalized(v0)
    start = (v, product(v), jnp.asarray(0.0), jnp.asarray(0))
    _, z, value, _ = lax.while_loop(going, step, start)
    return value, _normalized(z)


def _power(m: jax.Array, p: int, precision: lax.Precision) -> jax.Array:
    """``m**p`` for an integer ``p >= 1``, by repeated squaring."""
    out = None
    while p:
        if p & 1:
            out = m if out is None else jnp.matmul(out, m, precision=precision)
        p >>= 1
        if p:
            m = jnp.matmul(m, m, precision=precision)
    return out


def _positive_int(api: str, name: str, value: Any) -> int:
    if isinstance(value, jax.core.Tracer | bool):
        ok = False
    else:
        try:
            ok = float(np.asarray(value)).is_integer() and float(np.asarray(value)) >= 1
        except (TypeError, ValueError):
            ok = False
    if not ok:
        raise ValueError(
            f"`{api}` needs {name} a positive integer (a Python number, not traced). "
            f"Received: {name}={reprs.short(value)}."
        )
    return int(float(np.asarray(value)))


def matrix_inverse_pth_root(
    matrix: ArrayLike,
    p: ArrayLike,
    num_iters: ArrayLike = 100,
    ridge_epsilon: ArrayLike = 1e-6,
    error_tolerance: ArrayLike = 1e-6,
    precision: lax.Precision = lax.Precision.HIGHEST,
) -> tuple[jax.Array, jax.Array]:
    r"""``matrix ** (-1 / p)`` of a symmetric positive semi-definite matrix (Shampoo's roots).

    Coupled Newton iterations (Higham, eq. 7.18) on the damped matrix
    :math:`A + \epsilon \lambda_{\max} I`, from :math:`M_0 = z A`, :math:`H_0 = z^{1/p} I`
    with :math:`z = (1 + p) / (2 \|A\|_F)`:

    .. math::
      X_k = \tfrac{p + 1}{p} I - \tfrac{1}{p} M_k, \qquad
      M_{k+1} = X_k^p M_k, \qquad H_{k+1} = H_k X_k

    :math:`H_k \to A^{-1/p}` as :math:`M_k \to I`. Iteration stops when
    :math:`\max|M_k - I|` is at most ``error_tolerance``, after ``num_iters``
    iterations, or when the error grows by more than 1.2x (the previous :math:`H` is then
    returned).

    Args:
      matrix: a symmetric positive semi-definite matrix.
      p: the root, a positive integer.
      num_iters: the largest number of iterations.
      ridge_epsilon: :math:`\epsilon`, relative to the largest eigenvalue
        :math:`\lambda_{\max}` (found by `power_iteration`).
      error_tolerance: the error :math:`\max|M_k - I|` at which to stop.
      precision: the precision of the matrix products (`jax.lax.Precision`).

    Returns:
      ``(root, error)``: the root in ``matrix``'s dtype, and :math:`\max|M - I|` at the
      end (0 for a 1 x 1 matrix).

    Raises:
      ValueError: ``p`` is not a positive integer, or ``matrix`` is not square.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> root, _ = optx.matrix_inverse_pth_root(jnp.diag(jnp.array([4.0, 16.0])), 2)
      >>> [round(float(x), 3) for x in jnp.diag(root)]
      [0.5, 0.25]

    References:
      Higham, `Functions of Matrices: Theory and Computation
      <https://doi.org/10.1137/1.9780898717778>`_, SIAM 2008 (section 7.3).
    """
    api = "optx.matrix_inverse_pth_root"
    p = _positive_int(api, "p", p)
    matrix = jnp.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(
            f"`{api}` needs a square matrix. Received: matrix of shape {matrix.shape}."
        )
    n = matrix.shape[0]
    alpha = jnp.asarray(-1.0 / p, jnp.float32)
    eye = jnp.eye(n, dtype=jnp.float32)
    max_ev, _ = power_iteration(matrix, num_iters=100, error_tolerance=1e-6, precision=precision)
    ridge = ridge_epsilon * jnp.maximum(max_ev, 1e-16)
    if n == 1:
        return (matrix + ridge) ** alpha, jnp.asarray(0.0, jnp.float32)

    def going(carry: tuple[Any, ...]) -> jax.Array:
        i, _, _, _, error, improving = carry
        return (i < num_iters) & (error > error_tolerance) & improving

    def step(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        i, m, h, _, error, _ = carry
        x = (1 - alpha) * eye + alpha * m
        new_m = jnp.matmul(_power(x, p, precision), m, precision=precision)
        new_error = jnp.max(jnp.abs(new_m - eye))
        # The error may rise for an iteration before it falls: allow up to 1.2x.
        return (
            i + 1,
            new_m,
            jnp.matmul(h, x, precision=precision),
            h,
            new_error,
            new_error < error * 1.2,
        )

    damped = matrix + ridge * eye
    z = (1 + p) / (2 * jnp.linalg.norm(damped))
    m0 = damped * z
    h0 = eye * jnp.power(z, 1.0 / p)
    start = (0, m0, h0, h0, jnp.max(jnp.abs(m0 - eye)), True)
    _, m, h, previous, _, improving = lax.while_loop(going, step, start)
    root = jnp.where(improving, h, previous).astype(matrix.dtype)
    return root, jnp.max(jnp.abs(m - eye))


def _spectral_bound(q: jax.Array) -> jax.Array:
    """An upper bound on the spectral radius of ``q``: its smaller of Frobenius and 1-norm."""
    if q.size == 0:
        return jnp.zeros([], q.dtype)
    return jnp.minimum(jnp.linalg.norm(q, "fro"), jnp.linalg.norm(q, 1))


def nnls(
    A: jax.Array,
    b: jax.Array,
    iters: int,
    unroll: int | bool = 1,
    L: ArrayLike | None = None,
) -> jax.Array:
    r"""Non-negative least squares :math:`\min_{x \ge 0} \|A x - b\|_2` (fast projected gradient).

    With :math:`Q = A^\top A`, :math:`q = A^\top b` and :math:`L \ge \rho(Q)`, from
    :math:`x_0 = y_0 = 0`, :math:`c_0 = 0`:

    .. math::
      c_{k+1} = \tfrac{1 + \sqrt{1 + 4 c_k^2}}{2}, \quad
      x_{k+1} = \max\big(y_k - (Q y_k - q) / L,\ 0\big), \quad
      y_{k+1} = x_{k+1} + \tfrac{c_k - 1}{c_{k+1}} (x_{k+1} - x_k)

    Args:
      A: the matrix, of shape ``(M, N)``.
      b: the right-hand side, of shape ``(M,)`` or ``(M, K)`` (``K`` problems at once).
      iters: the number of iterations.
      unroll: passed to `jax.lax.scan`.
      L: an upper bound on the largest eigenvalue of :math:`A^\top A`; by default the
        smaller of its Frobenius norm and 1-norm.

    Returns:
      :math:`x`, of shape ``(N,)`` or ``(N, K)``.

    Raises:
      ValueError: ``A`` is not a matrix, ``b`` not a vector or matrix with ``A``'s number
        of rows, or ``iters`` negative.

    Example:
      >>> import jax.numpy as jnp, optx
      >>> x = optx.nnls(jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([5.0, 6.0]), 1000)
      >>> [round(float(v), 2) for v in x]
      [0.0, 1.7]

    References:
      Polyak, `Projected gradient method for non-negative least square
      <https://doi.org/10.1090/conm/636/12735>`_, Contemporary Mathematics 636, 2015.
    """
    api = "optx.nnls"
    A, b = jnp.asarray(A), jnp.asarray(b)
    if A.ndim != 2:
        raise ValueError(f"`{api}` needs A a matrix. Received: A of shape {A.shape}.")
    if b.ndim not in (1, 2) or b.shape[0] != A.shape[0]:
        raise ValueError(
            f"`{api}` needs b of shape (M,) or (M, K) with M = {A.shape[0]}, A's rows. "
            f"Received: b of shape {b.shape}."
        )
    if isinstance(iters, bool) or operator.index(iters) < 0:
        raise ValueError(f"`{api}` needs iters >= 0. Received: iters={iters!r}.")
    Q = A.mT @ A
    q = A.mT @ b
    bound = _spectral_bound(Q) if L is None else jnp.asarray(L)
    bound = jnp.where(bound == 0, 1, bound)

    def step(carry: tuple[Any, ...], _: Any) -> tuple[tuple[Any, ...], None]:
        x, y, c = carry
        c_next = (1 + jnp.sqrt(1 + 4 * c**2)) / 2
        x_next = jnp.clip(y - (Q @ y - q) / bound, 0)
        return (x_next, x_next + (c - 1) / c_next * (x_next - x), c_next), None

    x0 = jnp.zeros(A.shape[-1:] + b.shape[1:], b.dtype)
    (x, _, _), _ = lax.scan(step, (x0, x0, 0.0), length=iters, unroll=unroll)
    return x
