"""Task inference for CL3 from per-task input densities: probabilistic PCA.

In CL3 (van de Ven & Tolias 2019) the task of a test input is not given (von Oswald et
al. 2020 infer it from predictive entropy or a replay-trained network). Here each task
keeps, fitted once at its end on its training images, a probabilistic PCA of its inputs
(Tipping & Bishop 1999, "Probabilistic principal component analysis", J. R. Stat. Soc. B
61(3)): :func:`ppca_fit`; a test input gets the task of highest
:func:`ppca_log_likelihood` (``config.continual.task_inference="ppca"``). Stored per
task: ``D (r + 1) + r + 1`` floats; the fit forms the ``D x D`` sample covariance, so it
suits images up to a few thousand values (28x28: 784)."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import tensorflow as tf


def ppca_fit(x: np.ndarray, components: int, floor: float = 1e-6,
             overwrite_x: bool = False) -> Tuple[np.ndarray, np.ndarray, np.ndarray, float]:
  """The maximum-likelihood probabilistic PCA of ``x`` (Tipping & Bishop 1999, Eq. 7-8).

  Args:
    x: ``[N, D]`` (or ``[N, ...]``, flattened) examples, any float or integer dtype;
      computed in float64.
    components: ``r``, ``1 <= r < D``.
    floor: eigenvalues are kept above ``floor`` times the mean eigenvalue, and above
      1e-12 (pixels that never change, e.g. an image's border, have zero variance).
    overwrite_x: ``x`` (float64) may be centred in place: no second ``[N, D]`` float64
      array (an input of another dtype is converted to a new array, centred in place
      either way).

  Returns:
    ``(mean [D], basis [r, D], scales [r], noise)``: the mean, the top ``r``
    eigenvectors of the sample covariance (rows), their eigenvalues (descending) and
    ``sigma^2``, the mean of the other ``D - r`` eigenvalues; float64.

  Raises:
    ValueError: ``components`` not an integer in ``[1, D)``, or no more examples than
      components (the sample covariance would have fewer than ``r`` non-zero eigenvalues).
  """
  given = x
  x = np.asarray(x, np.float64)
  # A new array (converted from another dtype or a list) is centred in place too.
  own = overwrite_x or not (isinstance(given, np.ndarray) and np.may_share_memory(x, given))
  if x.ndim < 2 or not x.size:
    raise ValueError(f"ppca_fit needs examples [N, D] (or [N, ...]), got shape {x.shape}.")
  x = x.reshape(len(x), -1)
  n, d = x.shape
  if (isinstance(components, bool) or not isinstance(components, (int, np.integer))
      or not 1 <= components < d):
    raise ValueError(f"components={components!r} must be an integer in [1, {d}) (the "
                     f"input has {d} values per example).")
  if n <= components:
    raise ValueError(f"ppca_fit with components={components} needs more examples than "
                     f"components, got {n}.")
  mean = x.mean(0)
  if own and x.flags.writeable:
    x -= mean
    centred = x
  else:
    centred = x - mean
  cov = centred.T @ centred / n
  values, vectors = np.linalg.eigh(cov)              # ascending
  values, vectors = values[::-1], vectors[:, ::-1]
  values = np.maximum(values, max(floor * values.mean(), 1e-12))
  scales = values[:components].copy()
  noise = float(values[components:].mean())
  return mean, vectors[:, :components].T.copy(), scales, noise


def ppca_log_likelihood(x: tf.Tensor, mean: tf.Tensor, basis: tf.Tensor, scales: tf.Tensor,
                        noise: tf.Tensor) -> tf.Tensor:
  """``log p(x)`` under one or several probabilistic PCA models.

  The Gaussian ``N(mu, C)`` with ``C = W W^T + sigma^2 I`` (Tipping & Bishop 1999, Sec. 3)
  whose eigenvalues are ``lambda_1..lambda_r`` (``scales``) along the rows ``U_r`` of
  ``basis`` and ``sigma^2`` (``noise``) elsewhere::

    log p(x) = -1/2 [ D log 2 pi + sum_i log lambda_i + (D - r) log sigma^2
                      + sum_i z_i^2 / lambda_i + (|x - mu|^2 - |z|^2) / sigma^2 ],
    z = U_r^T (x - mu).

  Args:
    x: ``[B, ...]`` inputs (flattened to ``[B, D]``), float.
    mean: ``[D]`` or ``[T, D]``; basis: ``[r, D]`` or ``[T, r, D]`` (orthonormal rows);
      scales: ``[r]`` or ``[T, r]``; noise: ``[]`` or ``[T]``: as :func:`ppca_fit`
      returns them (stacked over ``T`` models); arrays, tensors or floats, all computed
      in ``mean``'s float dtype.

  Returns:
    ``[B]`` log-densities, or ``[T, B]`` for stacked models; ``mean``'s dtype.
  """
  mean = tf.convert_to_tensor(mean)
  basis, scales, noise = (tf.cast(tf.convert_to_tensor(v), mean.dtype)
                          for v in (basis, scales, noise))
  stacked = len(mean.shape) == 2
  if not stacked:
    mean, basis, scales, noise = mean[None], basis[None], scales[None], noise[None]
  dtype = mean.dtype
  x = tf.reshape(tf.cast(x, dtype), [tf.shape(x)[0], -1])               # [B, D]
  d = tf.cast(tf.shape(mean)[-1], dtype)
  r = tf.cast(tf.shape(scales)[-1], dtype)
  centred = x[None] - mean[:, None]                                      # [T, B, D]
  z = tf.einsum("tbd,trd->tbr", centred, basis)                          # [T, B, r]
  z2 = tf.reduce_sum(tf.square(z), -1)
  residual = tf.reduce_sum(tf.square(centred), -1) - z2
  quad = tf.reduce_sum(tf.square(z) / scales[:, None], -1) + residual / noise[:, None]
  logdet = tf.reduce_sum(tf.math.log(scales), -1) + (d - r) * tf.math.log(noise)
  out = -0.5 * (d * tf.math.log(tf.constant(2 * np.pi, dtype)) + logdet[:, None] + quad)
  return out if stacked else out[0]
