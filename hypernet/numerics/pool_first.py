"""Bias -> ReLU -> 2x2 max-pool computed pool first: part of the fused blocks of :mod:`.accel`.

For a per-channel bias ``b``, ``x -> fl(x + b)`` and ``relu`` are non-decreasing, so the
window's largest ``z`` also gives the largest ``relu(z + b)``:

    max_pool(relu(z + b)) == relu(max_pool(z) + b)        (bit for bit in the values)

The right-hand side adds the bias and applies the ReLU to a quarter of the tensor, and
in a traced step the full-size ``BiasAdd`` / ``Relu`` and their gradients drop out of
the graph (nothing reads them). Gradients: ``z`` gets the same values at the same places
(the pool's gradient picks the window's largest ``z`` where TensorFlow's picks the
largest ``z + b``: the same element unless two different ``z`` of a window round to the
same ``z + b``); the bias's gradient is the same sum taken over the pooled tensor, equal
to float rounding. Second derivatives are TensorFlow's own (``MaxPoolGradGrad``).

Within ``norm_relu_pool.scope()`` the one ``MaxPooling2D`` dispatcher
(:mod:`.norm_relu_pool`) asks :func:`pooled_block` when the BatchNorm kernel does not
apply: a ``conv -> ReLU -> MaxPooling2D(2)`` block without BatchNorm, such as
``hn.tasks.targets.make_cnn(..., batch_norm=False)``'s. Measured: docs/performance.md
("A hypernetwork training step").
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

_ADDS = ("AddV2", "Add")
# Whose bias the rule moves behind the pool: a convolution's own (a normalisation's
# offset before a ReLU keeps its rounding: MAML++'s per-step BatchNorm, float64 Keras
# BatchNorm).
_CONVOLUTIONS = ("Conv2D",)


def _per_channel(b: tf.Tensor, channels: int) -> bool:
  """``b`` is ``[C]`` or ``[1, ..., 1, C]`` (broadcasts along the last axis only)."""
  dims = b.shape.as_list() if b.shape.rank is not None else None
  return bool(dims) and all(d == 1 for d in dims[:-1]) and dims[-1] == channels


def _biased_input(pre: tf.Tensor):
  """``(z, add)`` where ``pre = add(z)`` is ``z`` plus a per-channel bias (a ``BiasAdd``
  in NHWC, or a broadcast add as :mod:`.plain_bias` writes it), ``add`` applying the same
  bias to a tensor of ``z``'s rank; ``None`` otherwise."""
  op = pre.op
  if pre.shape.rank != 4 or pre.shape[-1] is None:
    return None
  channels = pre.shape[-1]
  if op.type == "BiasAdd":
    if op.get_attr("data_format") not in (b"NHWC", "NHWC"):
      return None
    z, b = op.inputs
    return z, lambda t: tf.nn.bias_add(t, b)
  if op.type in _ADDS:
    x1, x2 = op.inputs
    for z, b, first in ((x1, x2, True), (x2, x1, False)):
      if z.shape.is_compatible_with(pre.shape) and z.shape.rank == 4 and _per_channel(
          b, channels):
        return z, (lambda t, b=b: t + b) if first else (lambda t, b=b: b + t)
  return None


def pooled_block(layer, inputs) -> Optional[tf.Tensor]:
  """``relu(max_pool(z) + b)`` for ``layer`` (a ``MaxPooling2D``) called on
  ``inputs = relu(z + b)``; ``None`` where the rule does not apply (the caller runs the
  pool as it is).

  Applies to a 2x2, stride-2, ``"valid"``, ``channels_last`` pool of a float ``Relu``
  whose input is a ``Conv2D``'s output ``z`` plus a per-channel bias (a ``BiasAdd`` or
  a broadcast add: :func:`_biased_input`), in a graph being traced (eagerly the
  full-size ops have already run: nothing to save).

  Args:
    layer: the ``keras.layers.MaxPooling2D`` being called.
    inputs: its input tensor ``[N, H, W, C]``.

  Returns:
    ``[N, H // 2, W // 2, C]`` in ``inputs``' dtype, or ``None``.
  """
  if tf.executing_eagerly():
    return None
  if (tuple(layer.pool_size) != (2, 2) or tuple(layer.strides) != (2, 2)
      or layer.padding != "valid" or layer.data_format != "channels_last"):
    return None
  op = getattr(inputs, "op", None)
  if op is None or op.type != "Relu" or not inputs.dtype.is_floating:
    return None
  found = _biased_input(op.inputs[0])
  if found is None:
    return None
  z, add = found
  if z.op.type not in _CONVOLUTIONS or z.op.get_attr("data_format") not in (b"NHWC", "NHWC"):
    return None
  pooled = tf.nn.max_pool2d(z, 2, 2, "VALID")
  return tf.nn.relu(add(pooled))
