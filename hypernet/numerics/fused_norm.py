"""Training-mode BatchNormalization on TensorFlow's fused kernel inside functional calls.

Within :func:`fused_batch_norm_scope` (one of the accelerations of :mod:`.accel`), a
plain float32 training-mode ``BatchNormalization`` over the last axis runs on
``FusedBatchNormV3``, exact to second order, with Keras' moving-statistics update;
everything else runs Keras' own code. Where it applies and its derivatives:
``docs/numerics.md`` ("Fused training-mode BatchNorm")."""
from __future__ import annotations

import contextlib
from typing import Iterator, Tuple

import keras
import numpy as np
import tensorflow as tf

from hypernet.numerics import compat, norm_relu_pool, second_order

_on = compat.Switch("hypernet.numerics.fused_norm.fused_batch_norm_scope()")
_off = compat.Switch("hypernet.numerics.fused_norm.disabled()")
_original_call = None
_unavailable = None  # why the fused path is off in this process (canary)


def _fusable(layer, inputs, training, mask) -> bool:
  if not (training is True and layer.trainable and mask is None):
    return False
  # A subclass that redefines the moments or the call computes something else.
  cls = type(layer)
  if cls.call is not _dispatching_call or compat.redefines_batch_norm_moments(cls):
    return False
  if getattr(layer, "renorm", False) or getattr(layer, "synchronized", False):
    return False
  rank = inputs.shape.rank
  if rank is None or rank < 2:
    return False
  axis = layer.axis if isinstance(layer.axis, int) else None
  if axis is None or axis % rank != rank - 1:
    return False
  dtype = keras.backend.result_type(inputs.dtype, "float32")
  return dtype == "float32" and inputs.shape[-1] is not None


def fused_batch_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor,
                     epsilon: float) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """Training-mode batch norm of ``x`` ``[N, H, W, C]`` float32 on ``FusedBatchNormV3``.

  Returns ``(y, mean, variance)``: ``y = gamma (x - mean) / sqrt(variance + epsilon) +
  beta`` with the batch moments over ``N, H, W`` (Ioffe & Szegedy 2015, Alg. 1), and
  the moments themselves (``variance`` biased, as Keras tracks it; 0 for one value per
  channel). All three are differentiable with respect to ``x``, ``gamma`` and
  ``beta``: ``y`` by the kernel's own gradient ``FusedBatchNormGradV3`` (whose
  registered gradient makes second derivatives exact), the moments by ``1 / n`` and
  ``2 (x - mean(x)) / n`` (TensorFlow gives the kernel's moment outputs no gradient, so
  a loss through the moving statistics, e.g. an inference-mode query after adaptation,
  would otherwise get zero). The moment terms are built only when something depends on
  the moments.
  """
  c = int(x.shape[-1])
  n_static = x.shape[:3].num_elements()

  @tf.custom_gradient
  def fused(x, gamma, beta):
    y, mean, variance, r1, r2, r3 = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=gamma, offset=beta, mean=tf.zeros([0], tf.float32),
        variance=tf.zeros([0], tf.float32), epsilon=epsilon, exponential_avg_factor=1.0,
        data_format="NHWC", is_training=True)
    # The kernel's batch variance is Bessel-corrected (n - 1); Keras tracks the biased
    # one. One value per channel: 0, as Keras gives (whatever the kernel divides by).
    if n_static is not None:
      n = float(n_static)
      variance = variance * ((n - 1.0) / n) if n > 1 else tf.zeros_like(variance)
    else:
      n = tf.cast(tf.size(x) // c, tf.float32)
      variance = tf.where(n > 1.0, variance * ((n - 1.0) / tf.maximum(n, 1.0)),
                          tf.zeros_like(variance))

    def grad(dy, dmean, dvariance):
      dx, dgamma, dbeta, _, _ = tf.raw_ops.FusedBatchNormGradV3(
          y_backprop=dy, x=x, scale=gamma, reserve_space_1=r1, reserve_space_2=r2,
          reserve_space_3=r3, epsilon=epsilon, data_format="NHWC", is_training=True)
      return second_order.add_moment_gradients(dx, x, dmean, dvariance, n), dgamma, dbeta

    return (y, mean, variance), grad

  return fused(x, gamma, beta)


def fused_batch_norm_call(layer, inputs) -> tf.Tensor:
  """What ``layer(inputs, training=True)`` computes, through ``FusedBatchNormV3``.

  Normalises over every axis but the last with the batch moments, then scales by
  ``gamma`` and shifts by ``beta`` (Ioffe & Szegedy 2015, Alg. 1), and assigns the
  moving mean / variance as Keras does (``moving * momentum + batch * (1 - momentum)``,
  biased batch variance). Inside ``Layer.stateless_call`` the assignments go to the
  stateless scope, as Keras' own call's do.

  Args:
    layer: a built ``keras.layers.BatchNormalization`` over the last axis.
    inputs: ``[N, ..., C]`` float32 (or float16 / bfloat16, computed in float32).

  Returns:
    ``[N, ..., C]`` in the layer's compute dtype.
  """
  x = tf.cast(inputs, tf.float32)
  c = int(x.shape[-1])
  x4 = x if x.shape.rank == 4 else tf.reshape(x, [tf.shape(x)[0], -1, 1, c])
  gamma = tf.cast(layer.gamma, tf.float32) if layer.scale else tf.ones([c], tf.float32)
  beta = tf.cast(layer.beta, tf.float32) if layer.center else tf.zeros([c], tf.float32)
  epsilon = float(layer.epsilon)
  y, mean, variance = fused_batch_norm(x4, gamma, beta, epsilon)
  moving = (tf.cast(layer.moving_mean, tf.float32), tf.cast(layer.moving_variance, tf.float32))
  _update_moving_statistics(layer, moving, mean, variance)
  if x.shape.rank != 4:
    y = tf.reshape(y, tf.shape(x))
  y = tf.cast(y, layer.compute_dtype)
  if x.shape.rank == 4 and y.dtype == tf.float32 and norm_relu_pool.is_active():
    def fuse():
      # A max-pool of this output's ReLU: the whole block on one kernel, and the moving
      # statistics reassigned from its moments (the ops above then have no consumer).
      conv, bias = _split_bias(x4)
      pooled, mean, variance = norm_relu_pool.norm_relu_pool(
          conv, gamma, beta, epsilon, shift=bias)
      _update_moving_statistics(layer, moving, mean, variance)
      return pooled
    norm_relu_pool.register_batch_norm(y, fuse)
  return y


def _split_bias(x: tf.Tensor):
  """``(x, None)``, or ``(conv, bias)`` when ``x`` was computed as ``conv + bias`` with a
  ``[C]`` bias (a convolution's bias added by :mod:`hypernet.numerics.plain_bias`): the
  normalisation removes the bias, so the fused block takes it apart."""
  op = getattr(x, "op", None)
  if op is None or op.type not in ("AddV2", "Add") or len(op.inputs) != 2:
    return x, None
  conv, bias = op.inputs
  if (bias.shape.rank == 1 and bias.shape[0] == x.shape[-1] and conv.dtype == x.dtype
      and conv.shape.rank == 4 and conv.shape.is_compatible_with(x.shape)):
    return conv, bias
  return x, None


def _update_moving_statistics(layer, moving, mean, variance) -> None:
  """Keras' update: ``moving * momentum + batch * (1 - momentum)`` from the values
  ``moving`` read before the call."""
  momentum = float(layer.momentum)
  layer.moving_mean.assign(moving[0] * momentum + mean * (1.0 - momentum))
  layer.moving_variance.assign(moving[1] * momentum + variance * (1.0 - momentum))


def _dispatching_call(self, inputs, training=None, mask=None):
  if is_active() and _fusable(self, inputs, training, mask):
    return fused_batch_norm_call(self, inputs)
  return _original_call(self, inputs, training=training, mask=mask)


def _canary():
  """The fused call against Keras' own on a tiny batch ``[3, 2, 2, 3]``: values, moving
  statistics and first derivatives against Keras', second derivatives against float64
  exact ones (:func:`hypernet.numerics.second_order.exact_moments`). Also checks
  ``FusedBatchNormV3``'s conventions (Bessel-corrected variance output, an exact
  registered second derivative)."""
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(1.0, 2.0, (3, 2, 2, 3)), tf.float32)
  c = tf.constant(rng.normal(size=(3, 2, 2, 3)), tf.float32)
  d = tf.constant(rng.normal(size=(3, 2, 2, 3)), tf.float32)
  bn = keras.layers.BatchNormalization(momentum=0.8, epsilon=1e-3, dtype="float32")
  bn.build(x.shape)
  start = [rng.uniform(0.5, 1.5, 3).astype("float32") for _ in range(4)]
  bn.gamma.assign(start[0])
  bn.beta.assign(start[1])

  def run(call):
    bn.moving_mean.assign(start[2])
    bn.moving_variance.assign(start[3])
    with tf.GradientTape() as t2:
      t2.watch(x)
      with tf.GradientTape() as t1:
        t1.watch(x)
        y = tf.cast(call(x), tf.float64)
        f = tf.reduce_sum(y * tf.cast(c, tf.float64))
      g = t1.gradient(f, x)
      h = tf.reduce_sum(tf.cast(g, tf.float64) * tf.cast(d, tf.float64))
    return [t.numpy() for t in (y, g, t2.gradient(h, x))] + [
        bn.moving_mean.numpy(), bn.moving_variance.numpy()]

  def reference(x):
    x = tf.cast(x, tf.float64)
    mean, var = second_order.exact_moments(x, [0, 1, 2])
    return (start[0].astype("float64") * (x - mean) / tf.sqrt(var + 1e-3)
            + start[1].astype("float64"))

  fused = run(lambda x: fused_batch_norm_call(bn, x))
  ref = run(lambda x: _original_call(bn, x, training=True))
  ref[2] = run(reference)[2]
  names = ["output", "first derivative", "second derivative", "moving mean",
           "moving variance"]
  for name, a, b in zip(names, fused, ref):
    if not np.allclose(a, b, rtol=1e-3, atol=1e-4 * (1.0 + np.abs(b).max())):
      return f"{name}: max |fused - reference| {np.abs(a - b).max():.2e}"
  return None


def _install() -> bool:
  """Puts the per-thread dispatcher in place of ``BatchNormalization.call`` (once) and
  checks the fused path at first use (:func:`_canary`). Returns whether the fused path
  is available; if not, one warning says why, and Keras' own code runs."""
  global _original_call, _unavailable
  if _unavailable is not None:
    return False
  try:
    original = compat.install_dispatcher(
        keras.layers.BatchNormalization, "call", _dispatching_call,
        ["self", "inputs", "training", "mask"])
    if _original_call is None:  # (kept when replaced, e.g. by a test's simulation)
      _original_call = original
  except compat.UnsupportedVersionError as e:
    _unavailable = e.detail
  else:
    reason = compat.run_canary("fused_batch_norm", _canary)
    if reason is not None:
      _unavailable = (f"the fused BatchNorm does not match Keras {keras.__version__}'s "
                      f"on a test batch ({reason})")
  if _unavailable is not None:
    compat.warn_once("fused_norm", "%s; BatchNormalization runs Keras' own code: only "
                     "speed is affected (same values, exact derivatives).", _unavailable)
    return False
  return True


@contextlib.contextmanager
def fused_batch_norm_scope() -> Iterator[None]:
  """Within the block (this thread), eligible BatchNorm calls use the fused kernel
  (``docs/numerics.md``). Re-entrant; it counts where it is entered (eagerly, or in the
  ``tf.function`` being traced); outside it Keras behaves as shipped. Where the fused
  path failed its check at first use, Keras' own code runs (one warning)."""
  _install()
  with _on():
    yield


def disabled():
  """Within the block (this thread), BatchNorm runs Keras' own code even inside
  functional calls: exact derivatives of every order (with :mod:`hypernet.numerics.second_order`'s
  moments), bit-for-bit Keras values, at the unfused speed. A re-entrant context
  manager.

  It counts where it is entered: eagerly, or in the ``tf.function`` being traced (enter
  it inside the traced function; entered around the call of a ``tf.function`` it does
  not reach the trace, and tracing warns once). It is per thread: under a
  ``tf.distribute`` strategy, enter it inside the replica function that ``strategy.run``
  calls (replicas run in threads of their own)."""
  return _off()


def is_active() -> bool:
  """Whether eligible BatchNorm calls in this thread use the fused kernel right now."""
  return _unavailable is None and _on.on() and not _off.on()
