"""Exact second derivatives through Keras BatchNormalization in training mode.

Keras 3's BatchNormalization (TensorFlow backend) computes batch moments with
``tf.nn.moments``, which evaluates the variance as ``mean((x - stop_gradient(mean))^2)``.
That is exact for first derivatives (the variance's derivative with respect to the mean
is zero) but drops a term of the *second* derivative, so a second-order meta-gradient
(MAML) through a training-mode BatchNorm would be silently wrong (1e-3 relative error on
a small float64 network, against central finite differences).

:func:`exact_batchnorm_moments` temporarily gives the BatchNormalization layers of a model
moments without the ``stop_gradient``; the inner loop of second-order learners runs under
it. Values and first derivatives are unchanged.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List

import keras
import tensorflow as tf


def exact_moments(x: tf.Tensor, axes, keepdims: bool = False):
  """Mean and (biased) variance of ``x`` over ``axes``, twice differentiable exactly.

  Same values as ``tf.nn.moments``; float16/bfloat16 inputs are reduced in float32 and
  the results cast back, as Keras does.

  Returns:
    ``(mean, variance)`` with ``axes`` reduced (kept as size 1 if ``keepdims``).
  """
  x = tf.convert_to_tensor(x)
  low = x.dtype in (tf.float16, tf.bfloat16)
  y = tf.cast(x, tf.float32) if low else x
  mean = tf.reduce_mean(y, axes, keepdims=True)
  variance = tf.reduce_mean(tf.square(y - mean), axes, keepdims=True)
  if not keepdims:
    mean, variance = tf.squeeze(mean, axes), tf.squeeze(variance, axes)
  if low:
    mean, variance = tf.cast(mean, x.dtype), tf.cast(variance, x.dtype)
  return mean, variance


def _batchnorm_layers(model: keras.layers.Layer) -> List[keras.layers.BatchNormalization]:
  layers = model._flatten_layers(include_self=True, recursive=True)  # pylint: disable=protected-access
  return [l for l in layers if isinstance(l, keras.layers.BatchNormalization)]


@contextlib.contextmanager
def exact_batchnorm_moments(model: keras.layers.Layer) -> Iterator[List[str]]:
  """Within the block, ``model``'s BatchNormalization layers use :func:`exact_moments`.

  Only unmasked, unsynchronised batch statistics are replaced (Keras' masked path is
  already exact); the layers are restored on exit, also on error. Yields the names of
  the layers changed.
  """
  layers = [l for l in _batchnorm_layers(model)
            if not getattr(l, "synchronized", False) and "_moments" not in vars(l)]
  for layer in layers:
    original = layer._moments  # pylint: disable=protected-access

    def moments(inputs, mask, _layer=layer, _original=original):
      if mask is not None:
        return _original(inputs, mask)
      return exact_moments(inputs, _layer._reduction_axes)  # pylint: disable=protected-access
    layer._moments = moments  # pylint: disable=protected-access
  try:
    yield [l.name for l in layers]
  finally:
    for layer in layers:
      del layer._moments  # pylint: disable=protected-access
