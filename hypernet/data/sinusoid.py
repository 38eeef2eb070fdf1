"""The sinusoid regression task family of Finn et al. 2017 (MAML, Sec. 5.1).

Each task is ``y = A sin(x - phi)`` with amplitude ``A ~ U[0.1, 5.0]`` and phase
``phi ~ U[0, pi]``; inputs ``x ~ U[-5, 5]``. The inner loop adapts on K support points
(K = 5, 10 in the paper) and the loss is measured on query points of the same task.

Task ``i`` is a pure function of ``(seed, i)`` (stateless random ops keyed by
``[seed, i]``); meta-batch ``s`` holds tasks ``s*T .. s*T + T-1``, so a resumed run
restarts at step ``s`` with ``start_step=s`` (see
:func:`hypernet.data.episodes.meta_batch_dataset`).
"""
from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from hypernet.data.episodes import _check_int, _check_seed, meta_batch_dataset

AMPLITUDE_RANGE = (0.1, 5.0)
PHASE_RANGE = (0.0, math.pi)
X_RANGE = (-5.0, 5.0)


def sinusoid(x, amplitude, phase):
  """``amplitude * sin(x - phase)`` (numpy or tf, broadcasting), for plotting true curves.

  The pipeline computes this in float64 from float32 inputs and rounds the result to
  float32; do the same to reproduce its values bit for bit.
  """
  if any(isinstance(v, (tf.Tensor, tf.Variable)) for v in (x, amplitude, phase)):
    return amplitude * tf.sin(x - phase)
  return amplitude * np.sin(np.subtract(x, phase))


def _check_range(name: str, value) -> Tuple[float, float]:
  try:
    lo, hi = (float(v) for v in value)
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be a pair (low, high) of floats, got {value!r}.") from None
  if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
    raise ValueError(f"{name} must be finite with low < high, got {value!r}.")
  return lo, hi


def make_sinusoid_task_fn(*, num_support: int = 10, num_query: int = 10, seed: int = 0,
                          amplitude_range: Tuple[float, float] = AMPLITUDE_RANGE,
                          phase_range: Tuple[float, float] = PHASE_RANGE,
                          x_range: Tuple[float, float] = X_RANGE,
                          return_params: bool = False) -> Callable[[tf.Tensor], Dict[str, tf.Tensor]]:
  """Returns ``task_fn(index) -> task``: one sinusoid regression task per index.

  Amplitude, phase and the support and query inputs are drawn independently and
  uniformly in float32 (``[low, high)``) by stateless random ops keyed by
  ``[seed, index]``; targets are ``A sin(x - phi)`` computed in float64 from those
  float32 values and rounded to float32.

  Args:
    num_support: K, support points per task.
    num_query: query points per task.
    seed: an int.
    amplitude_range, phase_range, x_range: the uniform ranges; defaults from Finn et al.
      2017: [0.1, 5.0], [0, pi], [-5, 5].
    return_params: also return ``"amplitude"`` and ``"phase"``.

  Returns:
    A function from a scalar int index to a dict: ``support_x``, ``support_y`` [K, 1]
    float32, ``query_x``, ``query_y`` [Q, 1] float32 and, with ``return_params``,
    ``amplitude`` and ``phase`` float32 scalars.

  Raises:
    ValueError: a count < 1, a bad seed or range.
  """
  k = _check_int("num_support", num_support, 1)
  q = _check_int("num_query", num_query, 1)
  seed = _check_seed(seed)
  a_lo, a_hi = _check_range("amplitude_range", amplitude_range)
  p_lo, p_hi = _check_range("phase_range", phase_range)
  x_lo, x_hi = _check_range("x_range", x_range)

  def task_fn(index) -> Dict[str, tf.Tensor]:
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(index, tf.int64)])
    keys = tf.random.experimental.stateless_split(key, num=4)
    amplitude = tf.random.stateless_uniform([], keys[0], a_lo, a_hi, tf.float32)
    phase = tf.random.stateless_uniform([], keys[1], p_lo, p_hi, tf.float32)

    def points(n, key):
      x = tf.random.stateless_uniform([n, 1], key, x_lo, x_hi, tf.float32)
      y = tf.cast(amplitude, tf.float64) * tf.sin(tf.cast(x, tf.float64) -
                                                  tf.cast(phase, tf.float64))
      return x, tf.cast(y, tf.float32)

    support_x, support_y = points(k, keys[2])
    query_x, query_y = points(q, keys[3])
    out = {"support_x": support_x, "support_y": support_y,
           "query_x": query_x, "query_y": query_y}
    if return_params:
      out["amplitude"] = amplitude
      out["phase"] = phase
    return out

  return task_fn


def sinusoid_dataset(*, meta_batch_size: int, num_support: int = 10, num_query: int = 10,
                     seed: int = 0, start_step: int = 0, num_steps: Optional[int] = None,
                     amplitude_range: Tuple[float, float] = AMPLITUDE_RANGE,
                     phase_range: Tuple[float, float] = PHASE_RANGE,
                     x_range: Tuple[float, float] = X_RANGE,
                     return_params: bool = False) -> tf.data.Dataset:
  """A tf.data pipeline of meta-batches of sinusoid regression tasks (Finn et al. 2017).

  Args:
    meta_batch_size: T, tasks per meta-batch (25 in the paper).
    num_support, num_query, seed, amplitude_range, phase_range, x_range, return_params:
      see :func:`make_sinusoid_task_fn`.
    start_step, num_steps: see :func:`hypernet.data.episodes.meta_batch_dataset`.

  Returns:
    A ``tf.data.Dataset`` of dicts: ``support_x``, ``support_y`` [T, K, 1] float32,
    ``query_x``, ``query_y`` [T, Q, 1] float32 and, with ``return_params``,
    ``amplitude``, ``phase`` [T] float32.

  Raises:
    ValueError: as :func:`make_sinusoid_task_fn` and ``meta_batch_dataset``.
  """
  fn = make_sinusoid_task_fn(num_support=num_support, num_query=num_query, seed=seed,
                             amplitude_range=amplitude_range, phase_range=phase_range,
                             x_range=x_range, return_params=return_params)
  return meta_batch_dataset(fn, meta_batch_size=meta_batch_size, start_step=start_step,
                            num_steps=num_steps)
