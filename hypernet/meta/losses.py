"""Per-task losses and metrics for the inner and outer loops: ``fn(labels, outputs)``.

Each returns a scalar: the mean over the task's examples. They are small on purpose (the
project's general objectives live elsewhere); what matters here is that they are twice
differentiable, which second-order MAML needs.
"""
from __future__ import annotations

from typing import Callable, Union

import tensorflow as tf


def _at_least_float32(outputs) -> tf.Tensor:
  """``outputs`` as a tensor, half-precision floats cast to float32: under a mixed
  precision policy the loss (and its gradient's start) is computed in float32, as Keras'
  own losses do (Micikevicius et al. 2018, section 3.3)."""
  outputs = tf.convert_to_tensor(outputs)
  if outputs.dtype in (tf.float16, tf.bfloat16):
    outputs = tf.cast(outputs, tf.float32)
  return outputs


def sparse_softmax_cross_entropy(labels, logits) -> tf.Tensor:
  """Mean softmax cross-entropy in nats (N-way classification).

  Args:
    labels: ``[B]`` int class ids in ``[0, N)``.
    logits: ``[B, N]`` float unnormalised log-probabilities.

  Returns:
    A scalar in the logits' dtype (float32 for float16 / bfloat16 logits, as Keras'
    losses compute under mixed precision).
  """
  logits = _at_least_float32(logits)
  labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
  return tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def mean_squared_error(targets, outputs) -> tf.Tensor:
  """Mean squared error ``mean((outputs - targets)^2)``, not halved (regression, e.g.
  sinusoid). ``targets`` may lack the outputs' trailing size-1 axis (``[B]`` vs
  ``[B, 1]``); otherwise shapes must match.

  Raises:
    ValueError: the shapes cannot be matched.
  """
  outputs = _at_least_float32(outputs)
  targets = tf.cast(targets, outputs.dtype)
  if targets.shape.rank == outputs.shape.rank - 1 and outputs.shape[-1] == 1:
    targets = targets[..., None]
  if targets.shape.rank != outputs.shape.rank:
    raise ValueError(f"mean_squared_error: targets of shape {targets.shape} do not match "
                     f"outputs of shape {outputs.shape}.")
  return tf.reduce_mean(tf.square(outputs - targets))


def sparse_accuracy(labels, logits) -> tf.Tensor:
  """Fraction of ``argmax(logits, -1) == labels``: a float32 scalar in [0, 1]."""
  labels = tf.cast(tf.reshape(labels, [-1]), tf.int64)
  return tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, axis=-1), labels), tf.float32))


LOSSES = {
    "sparse_softmax_cross_entropy": sparse_softmax_cross_entropy,
    "mse": mean_squared_error,
    "mean_squared_error": mean_squared_error,
}


def get_loss(loss: Union[str, Callable]) -> Callable:
  """A loss by name (``"sparse_softmax_cross_entropy"``, ``"mse"``) or a callable as is.

  Raises:
    ValueError: unknown name (the message lists the known names).
  """
  if callable(loss):
    return loss
  if loss not in LOSSES:
    raise ValueError(f"Unknown loss {loss!r}; use one of {sorted(LOSSES)} or a callable "
                     "loss(labels, outputs) -> scalar.")
  return LOSSES[loss]
