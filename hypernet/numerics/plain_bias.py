"""Bias additions as plain broadcast adds in the meta-learners' functional calls, on CPU.

Keras 3's TensorFlow backend turns ``ops.add(x, bias)`` into ``tf.nn.bias_add`` whenever
the second operand looks like a bias (one non-unit axis matching ``x``'s channels), so
that the bias can fuse into the convolution or matmul before it. On CPU, TensorFlow's
oneDNN graph pass then merges ``Conv2D`` + ``BiasAdd`` and, in the backward pass,
``Conv2DBackpropFilter`` + ``BiasAddGrad``. Inside meta-learning steps that costs twice:

* **Speed.** The Omniglot MAML meta-step (conv4 + BatchNorm, 5-way 1-shot, the
  ``Trainer``) against PyTorch without page faults went from 1.05-1.11x to 1.25-1.38x
  (second order) and from 0.98-1.01x to 1.10-1.28x (first order) with plain adds
  (``benchmarks/meta_bench.py``; README's benchmark section).
* **Correctness.** For a second-order learner whose inner step reads variables (Meta-SGD's
  per-parameter rates) inside the per-task loop, the merge sometimes builds a graph with
  a dependency cycle, and the first step fails with ``InvalidArgumentError: N nodes in a
  cycle``: here in 2 of 28 processes (5 of 10 with Grappler off), in none of 12 with
  oneDNN off (``TF_ENABLE_ONEDNN_OPTS=0``) or with plain adds
  (``tests/test_plain_bias.py``).

Within :func:`plain_bias_scope` (entered around every functional call of the
meta-learners, :func:`call`, and active when no GPU is visible), Keras' ``add`` of
float32 or float64 operands computes
``tf.add`` instead: Keras' own conversions and dtype promotion, and where Keras would
call ``bias_add``, the bias reshaped to the axis Keras' shortcut picks (the last one, or
axis 1 for its ``NCHW`` case) -- so the same values and shapes as Keras' own call, and
the same gradient (a sum over the broadcast axes), without the ``BiasAdd`` op. Half
precision keeps ``BiasAdd`` (its gradient sums in float32; a float16 ``Sum`` lost ~1% of
a conv bias gradient). Sparse and ragged operands, other threads and code outside
meta-learners' calls run Keras' own ``add``; so does a ``tf.function`` traced outside
the scope and called inside it. With a GPU visible nothing changes (cuDNN's fused bias
is not measured here).

Why only the meta-learners: there the merge broke graphs and cost speed. Elsewhere (the
hypernetwork training step) the speed was the same either way (``step_ratio.py``), and
the changed rounding of the bias gradient moved single-seed results of chaotic short
runs by seed-noise amounts (``digits_hyper`` seed 0: 98.61% -> 97.21%; the mean of 20
seeds 97.90% -> 97.49%), so those calls keep Keras' own ``add``.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import tensorflow as tf
from keras.src.backend.tensorflow import core as keras_core
from keras.src.backend.tensorflow import numpy as keras_numpy
from keras.src.backend.common import dtypes as keras_dtypes

from hypernet.numerics import devices, norm_relu_pool, second_order

_state = threading.local()
_original_add = None


def _cpu_only() -> bool:
  return devices.cpu_kernels()  # Off on GPU/TPU (devices' table).


def is_active() -> bool:
  """Whether Keras' ``add`` is a plain ``tf.add`` in this thread right now."""
  return getattr(_state, "depth", 0) > 0 and _cpu_only()


def _dense(x) -> bool:
  return not isinstance(x, (tf.SparseTensor, tf.IndexedSlices, tf.RaggedTensor))


def _bias_layout(x1: tf.Tensor, x2: tf.Tensor):
  """Keras' own test for its ``bias_add`` shortcut: ``"NHWC"`` (bias along the last
  axis), ``"NCHW"`` (along axis 1) or ``None`` (a plain broadcast add)."""
  if x1.shape.rank is None or x1.shape.rank < 2 or x2.shape.rank is None:
    return None
  squeezed = [d for d in x2.shape.as_list() if d is None or d > 1]
  if len(squeezed) != 1 or squeezed[0] is None:
    return None
  shape = x1.shape.as_list()
  if squeezed[0] not in (shape[1], shape[-1]):
    return None
  return "NHWC" if shape[-1] == squeezed[0] else "NCHW"


def _dispatching_add(x1, x2):
  if not (is_active() and _dense(x1) and _dense(x2)):
    return _original_add(x1, x2)
  # Keras' own conversions and dtype promotion (python scalars are weak types).
  if not isinstance(x1, (int, float)):
    x1 = keras_core.convert_to_tensor(x1)
  if not isinstance(x2, (int, float)):
    x2 = keras_core.convert_to_tensor(x2)
  dtype = keras_dtypes.result_type(getattr(x1, "dtype", type(x1)),
                                   getattr(x2, "dtype", type(x2)))
  if dtype not in ("float32", "float64"):
    # Half precision keeps BiasAddGrad, which sums in float32 (a float16 Sum does not).
    return _original_add(x1, x2)
  x1 = keras_core.convert_to_tensor(x1, dtype)
  x2 = keras_core.convert_to_tensor(x2, dtype)
  layout = _bias_layout(x1, x2)
  if layout is not None:  # What Keras' bias_add computes, as a broadcast add.
    x2 = tf.reshape(x2, [-1] if layout == "NHWC" else [-1] + [1] * (x1.shape.rank - 2))
  return tf.add(x1, x2)


def _install() -> None:
  """Puts the per-thread dispatcher in place of the backend's ``add`` (once)."""
  global _original_add
  _original_add = second_order.install_dispatcher(keras_numpy, "add", _dispatching_add)


def call(fn, *args, **kwargs):
  """``fn(*args, **kwargs)`` within :func:`plain_bias_scope` and
  :func:`hypernet.numerics.norm_relu_pool.scope` (BatchNorm -> ReLU -> max-pool blocks on one
  kernel): how the meta-learners (:mod:`hypernet.meta`, :mod:`hypernet.training.meta_tasks`) make
  their functional calls."""
  with plain_bias_scope(), norm_relu_pool.scope():
    return fn(*args, **kwargs)


@contextlib.contextmanager
def plain_bias_scope() -> Iterator[None]:
  """Within the block (this thread), Keras' ``add`` is a plain broadcast ``tf.add``
  (module doc). Re-entrant; the choice is made when a ``tf.function`` is traced."""
  _install()
  with second_order.thread_count(_state, "depth"):
    yield
