"""Bias additions as plain broadcast adds on CPU: one of the accelerations of :mod:`.accel`.

Within :func:`plain_bias_scope`, Keras' ``add`` of a float32 / float64 Dense or Conv bias
computes ``tf.add`` where Keras would call ``tf.nn.bias_add``: the same values, shapes
and gradient, without the ``BiasAdd`` op that oneDNN merges into the convolution and its
filter gradient. Where it applies and why: ``docs/numerics.md`` ("Plain bias adds")."""
from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import keras
import numpy as np
import tensorflow as tf

from hypernet.numerics import compat, devices, norm_relu_pool

_on = compat.Switch("hypernet.numerics.plain_bias.plain_bias_scope()")
_off = compat.Switch("hypernet.numerics.plain_bias.disabled()")
_original_add = None
_unavailable = None  # why Keras' own add runs everywhere in this process (canary)


def _cpu_only() -> bool:
  return devices.cpu_kernels()  # Off on GPU/TPU (devices' table).


def is_active() -> bool:
  """Whether Keras' ``add`` is a plain ``tf.add`` in this thread right now."""
  return _unavailable is None and _on.on() and not _off.on() and _cpu_only()


def _dense(x) -> bool:
  return not isinstance(x, (tf.SparseTensor, tf.IndexedSlices, tf.RaggedTensor))


def _bias_axis(x1: tf.Tensor, x2: tf.Tensor):
  """The axis of ``x1`` along which ``x2`` is a bias, where Keras' ``bias_add`` shortcut
  and a broadcast add agree: ``x2`` has one non-unit axis, of ``x1``'s channels, and
  broadcasts to the last axis of ``x1`` (``NHWC``) or to axis 1 when the last differs
  (``NCHW``). ``None`` otherwise (Keras' own ``add`` runs)."""
  r1, r2 = x1.shape.rank, x2.shape.rank
  if r1 is None or r2 is None or r1 < 2 or r2 > r1:
    return None
  dims = x2.shape.as_list()
  if any(d is None for d in dims):
    return None
  big = [i for i, d in enumerate(dims) if d > 1]
  if len(big) != 1:
    return None
  channels = dims[big[0]]
  axis = r1 - r2 + big[0]  # where the broadcast puts it
  shape = x1.shape.as_list()
  if axis == r1 - 1 and shape[-1] == channels:
    return axis
  if axis == 1 and shape[1] == channels and shape[-1] != channels:
    return axis
  return None


def _dispatching_add(x1, x2):
  if not (is_active() and _dense(x1) and _dense(x2)):
    return _original_add(x1, x2)
  if isinstance(x1, (int, float)) or isinstance(x2, (int, float)):
    return _original_add(x1, x2)
  # Keras' own conversions and dtype promotion.
  x1 = keras.ops.convert_to_tensor(x1)
  x2 = keras.ops.convert_to_tensor(x2)
  dtype = keras.backend.result_type(x1.dtype, x2.dtype)
  if dtype not in ("float32", "float64"):
    # Half precision keeps BiasAddGrad, which sums in float32 (a float16 Sum does not).
    return _original_add(x1, x2)
  x1 = keras.ops.convert_to_tensor(x1, dtype)
  x2 = keras.ops.convert_to_tensor(x2, dtype)
  axis = _bias_axis(x1, x2)
  if axis is None:
    return _original_add(x1, x2)
  if axis == x1.shape.rank - 1:  # a [C] vector (fused_norm takes conv + bias apart)
    x2 = tf.reshape(x2, [-1])
  return tf.add(x1, x2)  # what Keras' bias_add computes, as a broadcast add


def _install() -> None:
  """Puts the per-thread dispatcher in place of the backend's ``add`` (once) and checks
  it at first use (:func:`_canary`); if either fails, Keras' own ``add`` runs (one
  warning)."""
  global _original_add, _unavailable
  if _unavailable is not None:
    return
  try:
    module = compat.keras_backend("numpy", "add")
    original = compat.install_dispatcher(module, "add", _dispatching_add, ["x1", "x2"])
    if _original_add is None:  # (kept when replaced, e.g. by a test's simulation)
      _original_add = original
  except compat.UnsupportedVersionError as e:
    _unavailable = e.detail
  else:
    reason = compat.run_canary("plain_bias", _canary)
    if reason is not None:
      _unavailable = f"plain bias additions differ from Keras {keras.__version__}'s ({reason})"
  if _unavailable is not None:
    compat.warn_once("plain_bias", "%s; meta-learning steps use Keras' own add (BiasAdd): "
                     "only speed is affected (same values).", _unavailable)


# Shapes of the check at first use: (x1, x2) of Dense, channels-last and channels-first
# conv biases, and ones where a broadcast add and Keras' shortcut may disagree.
_CANARY_SHAPES = [([2, 3], [3]), ([2, 3, 5], [5]), ([2, 4, 4, 3], [1, 1, 1, 3]),
                  ([2, 3, 4, 5], [1, 3, 1, 1]), ([2, 3, 4, 4], [3, 1, 1]),
                  ([2, 3, 5], [3]), ([2, 3], [1, 3]), ([3, 3], [3, 1])]


def _canary():
  """``add`` with and without the switch on the shapes above (float32): the same values,
  shapes or errors; and a Dense layer traced in the scope on CPU has no ``BiasAdd``."""
  def outcome(x1, x2):
    try:
      y = keras.ops.add(x1, x2)
    except Exception as e:  # pylint: disable=broad-except
      return type(e).__name__
    return y.numpy()
  for a, b in _CANARY_SHAPES:
    x1 = tf.reshape(tf.range(np.prod(a), dtype=tf.float32), a)
    x2 = tf.reshape(tf.range(1, np.prod(b) + 1, dtype=tf.float32) * 100.0, b)
    want = outcome(x1, x2)
    with _on():
      got = outcome(x1, x2)
    same = (type(want) is type(got) and (
        want == got if isinstance(want, str) else
        want.shape == got.shape and np.array_equal(want, got)))
    if not same:
      return (f"{a} + {b}: Keras gives {getattr(want, 'shape', want)}, the plain add "
              f"{getattr(got, 'shape', got)}")
  if _cpu_only():
    layer = keras.layers.Dense(3)
    layer.build((2, 4))

    @tf.function(autograph=False)
    def traced(x):
      with _on():
        return layer(x)
    graph = traced.get_concrete_function(tf.TensorSpec([2, 4])).graph
    if "BiasAdd" in {op.type for op in graph.get_operations()}:
      compat.warn_once("plain_bias_unreached", "Keras %s's Dense bias no longer goes "
                       "through its backend add; meta-learning steps keep BiasAdd (slower on "
                       "CPU).", keras.__version__)
  return None


def call(fn, *args, **kwargs):
  """Deprecated: ``functional_call(..., accelerate="meta")`` does this.

  ``fn(*args, **kwargs)`` within :func:`plain_bias_scope` and
  :func:`hypernet.numerics.norm_relu_pool.scope`, as the meta-learners' functional calls
  ran before :mod:`hypernet.numerics.accel` (the same graph, so the same values)."""
  warnings.warn("hypernet.numerics.plain_bias.call(functional_call, ...) is deprecated; "
                "call functional_call(..., accelerate='meta').", DeprecationWarning,
                stacklevel=2)
  with plain_bias_scope(), norm_relu_pool.scope():
    return fn(*args, **kwargs)


@contextlib.contextmanager
def plain_bias_scope() -> Iterator[None]:
  """Within the block (this thread), Keras' ``add`` of a bias is a plain broadcast
  ``tf.add`` (``docs/numerics.md``). Re-entrant; it counts where it is entered (eagerly, or in the
  ``tf.function`` being traced: :class:`hypernet.numerics.compat.Switch`)."""
  _install()
  with _on():
    yield


def disabled():
  """Within the block (this thread), Keras' own ``add`` runs even inside
  :func:`plain_bias_scope`. A re-entrant context manager counted where it is entered
  (enter it inside the traced function), like :func:`plain_bias_scope`."""
  return _off()
