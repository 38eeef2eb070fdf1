"""Continual-learning penalties: the hypernetwork output regulariser and online EWC.

:func:`output_regularizer`: von Oswald, Henning, Grewe, Sacramento 2020, "Continual
learning with hypernetworks" (ICLR), Eq. 2: ``beta / (T - 1) * sum_{t < T}
||h(e_t, Theta*) - h(e_t, Theta + dTheta)||^2`` keeps the weights generated for earlier
tasks where they were (``dTheta``: an optional one-step look-ahead; over a random subset
of ``K`` past tasks, ``beta / K``: an unbiased estimate of the mean).
:func:`ewc_penalty` and :func:`diagonal_fisher`: online EWC (Kirkpatrick et al. 2017,
"Overcoming catastrophic forgetting in neural networks", PNAS, Eq. 3; Schwarz et al.
2018, "Progress & compress", Eq. 8) with the running Fisher ``F <- gamma F + F_task``."""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import tensorflow as tf

from hypernet.core import control_flow, ops


def flatten_weights(weights: Mapping[str, tf.Tensor], paths: Sequence[str],
                    leading: int = 0) -> tf.Tensor:
  """Concatenates ``weights[p]`` for ``p`` in ``paths`` into ``[*lead, P]`` (float32).

  ``leading``: how many leading axes (e.g. 1 for ``[S, ...]`` weight sets) to keep.
  """
  parts = []
  for p in paths:
    w = tf.convert_to_tensor(weights[p])
    lead = tf.shape(w)[:leading]
    parts.append(tf.reshape(tf.cast(w, tf.float32), tf.concat([lead, [-1]], 0)))
  return tf.concat(parts, axis=-1)


def output_regularizer(generated: tf.Tensor, targets: tf.Tensor, beta,
                       num_terms=None) -> tf.Tensor:
  """``beta / num_terms * sum_s ||generated[s] - targets[s]||^2`` (von Oswald et al. Eq. 2).

  Args:
    generated: ``[S, P]`` float, the hypernetwork's current outputs ``h(e_s)`` for ``S``
      past tasks (flattened over all generated weights, see :func:`flatten_weights`).
    targets: ``[S, P]``, the stored outputs for the same tasks.
    beta: the regularisation strength (Python float or scalar tensor; exact in the
      outputs' dtype).
    num_terms: the divisor (default ``S``): ``T - 1`` for all past tasks, ``K`` for a
      subset of ``K``.

  Returns:
    A scalar tensor of ``generated``'s dtype.

  Example: ``h(e) = A e`` with ``A = [[1, 2]]``, ``e_0 = [1, 0]``, target ``1.5``,
  ``beta = 0.1``: ``0.1 * (1 - 1.5)^2 = 0.025`` and ``d/dA = [[-0.1, 0]]``.
  """
  generated = tf.convert_to_tensor(generated)
  targets = tf.cast(targets, generated.dtype)
  n = tf.shape(generated)[0] if num_terms is None else num_terms
  n = tf.cast(n, generated.dtype)
  sq = tf.reduce_sum(tf.square(generated - tf.stop_gradient(targets)))
  return ops.to_dtype(beta, generated.dtype) * tf.math.divide_no_nan(sq, n)


def ewc_penalty(params: Sequence[tf.Tensor], anchors: Sequence[tf.Tensor],
                fisher: Sequence[tf.Tensor], strength) -> tf.Tensor:
  """Online EWC: ``strength / 2 * sum_i F_i (theta_i - theta*_i)^2`` (Kirkpatrick et al.
  2017 Eq. 3; Schwarz et al. 2018 Eq. 8).

  Args:
    params: the current parameters ``theta`` (tensors or variables).
    anchors: ``theta*`` after the previous task, same shapes.
    fisher: the running diagonal Fisher ``F``, same shapes (0 before the first task).
    strength: ``lambda`` (float).

  Returns:
    A float32 scalar.
  """
  total = tf.constant(0.0)
  for p, a, f in zip(params, anchors, fisher):
    p = tf.cast(tf.convert_to_tensor(p), tf.float32)
    total += tf.reduce_sum(tf.cast(f, tf.float32) * tf.square(p - tf.stop_gradient(
        tf.cast(a, tf.float32))))
  return ops.to_dtype(strength, tf.float32) * 0.5 * total


def diagonal_fisher(log_likelihood: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
                    params: Sequence[tf.Variable], images: tf.Tensor,
                    labels: tf.Tensor) -> list:
  """Empirical diagonal Fisher ``mean_n (d log p(y_n | x_n) / d theta)^2`` per parameter.

  Args:
    log_likelihood: ``(x [1, ...], y [1]) -> scalar`` log-probability of the label.
    params: the parameters (variables read by ``log_likelihood``).
    images: ``[N, ...]`` examples of the task; labels ``[N]`` int.

  Returns:
    A list of tensors shaped like ``params``.
  """
  def one(args):
    x, y = args
    with tf.GradientTape() as tape:
      ll = log_likelihood(x[None], y[None])
    grads = tape.gradient(ll, params)
    return [tf.square(tf.zeros_like(p) if g is None else tf.convert_to_tensor(g))
            for g, p in zip(grads, params)]

  squares = control_flow.map_fn(
      one, (images, labels), fn_output_signature=[tf.TensorSpec(p.shape, p.dtype)
                                                  for p in params])
  return [tf.reduce_mean(s, 0) for s in squares]
