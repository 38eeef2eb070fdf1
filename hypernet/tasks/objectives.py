"""Objectives: turn model outputs and a batch into per-example losses and metric sums.

Metrics are returned as ``{name: (sum, count)}`` pairs of float32 scalars, summed over
the local batch, so that the train loop can add them across steps and replicas and
divide once: each example counts once however the batch was split.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import tensorflow as tf

MetricSums = Dict[str, Tuple[tf.Tensor, tf.Tensor]]


def classification(logits: tf.Tensor, labels: tf.Tensor,
                   weights: Optional[tf.Tensor] = None) -> Tuple[tf.Tensor, MetricSums]:
  """Softmax cross-entropy classification.

  Args:
    logits: float ``[B, num_classes]``.
    labels: int ``[B]`` in ``[0, num_classes)``.
    weights: optional float32 ``[B]`` example weights (0 masks padding).

  Returns:
    ``(per_example_loss float32 [B] (nats, weighted), {"loss": (sum, count),
    "accuracy": (correct, count)})``.
  """
  logits = tf.cast(logits, tf.float32)
  labels = tf.cast(labels, tf.int32)
  if weights is None:
    weights = tf.ones_like(labels, tf.float32)
  per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  per_example = per_example * weights
  correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
  count = tf.reduce_sum(weights)
  return per_example, {
      "loss": (tf.reduce_sum(per_example), count),
      "accuracy": (tf.reduce_sum(correct * weights), count),
  }


def regression(predictions: tf.Tensor, targets: tf.Tensor,
               weights: Optional[tf.Tensor] = None) -> Tuple[tf.Tensor, MetricSums]:
  """Mean squared error per example (averaged over output dimensions).

  Args:
    predictions, targets: float ``[B, ...]`` of the same shape.
    weights: optional float32 ``[B]``.

  Returns:
    ``(per_example_loss float32 [B], {"loss": (sum, count)})``.
  """
  predictions = tf.cast(predictions, tf.float32)
  targets = tf.cast(targets, tf.float32)
  sq = tf.square(predictions - targets)
  per_example = tf.reduce_mean(tf.reshape(sq, [tf.shape(sq)[0], -1]), axis=-1)
  if weights is not None:
    per_example = per_example * weights
    count = tf.reduce_sum(weights)
  else:
    count = tf.cast(tf.shape(per_example)[0], tf.float32)
  return per_example, {"loss": (tf.reduce_sum(per_example), count)}


CI95_Z = 1.959963984540054  # the 97.5% quantile of the standard normal


def mean_and_ci95(total: float, total_sq: float, count: float) -> Tuple[float, float]:
  """Mean and half-width of its normal 95% confidence interval from running sums.

  ``mean = total / n``; ``ci95 = z * s / sqrt(n)`` with ``s`` the sample standard
  deviation (``n - 1`` in the denominator) and ``z = 1.96`` (the 97.5% normal quantile),
  the interval few-shot papers report over meta-test episodes (e.g. Finn et al. 2017,
  Table 1: mean accuracy +- 95% CI over 600 episodes).

  Args:
    total: sum of the per-episode values ``x_i``.
    total_sq: sum of their squares ``x_i ** 2``.
    count: ``n``, the number of values (a float, as metric counts are).

  Returns:
    ``(mean, ci95)`` floats; ``ci95`` is ``nan`` for ``n < 2``.
  """
  n = float(count)
  mean = float(total) / max(n, 1e-12)
  if n < 2:
    return mean, float("nan")
  var = max(float(total_sq) - n * mean * mean, 0.0) / (n - 1.0)
  return mean, CI95_Z * (var / n) ** 0.5


def finalize(sums: Dict[str, Tuple[float, float]]) -> Dict[str, float]:
  """``{name: (sum, count)}`` (numbers or tensors) -> ``{name: sum / count}`` floats.

  A metric ``name`` with a companion ``name + "_sq"`` (the sum of squares of the same
  per-item values, same count) gets ``name + "_ci95"``, the half-width of its 95%
  confidence interval (:func:`mean_and_ci95`), in place of the ``_sq`` entry.
  """
  out = {}
  for k, (s, c) in sums.items():
    if k.endswith("_sq") and k[:-3] in sums:
      base_sum, base_count = sums[k[:-3]]
      out[k[:-3] + "_ci95"] = mean_and_ci95(float(base_sum), float(s), float(base_count))[1]
    else:
      out[k] = float(s) / max(float(c), 1e-12)
  return out
