"""Tests for hypernet.numerics.fused_norm: training-mode BatchNorm on the fused kernel inside
functional calls, against Keras' own code and float64 exact derivatives."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.numerics import fused_norm

import supported


def _ops(fn, *args):
  """Op types of ``fn``'s graph and of every function in it (gradients included)."""
  graph = tf.function(fn).get_concrete_function(*args).graph.as_graph_def()
  found = {n.op for n in graph.node}
  for f in graph.library.function:
    found |= {n.op for n in f.node_def}
  return found


def _bn_model(shape, dtype="float32", **bn_kwargs):
  keras.utils.set_random_seed(0)
  inputs = keras.Input(shape, dtype=dtype)
  bn = keras.layers.BatchNormalization(name="bn", dtype=dtype, momentum=0.8, **bn_kwargs)
  model = keras.Model(inputs, bn(inputs))
  # Non-trivial gamma, beta and moving statistics.
  rng = np.random.default_rng(1)
  for v in bn.weights:
    v.assign(rng.uniform(0.5, 1.5, v.shape).astype(v.dtype))
  return model


@pytest.mark.parametrize("shape", [(6, 5, 3), (4, 3), (3,)])
@pytest.mark.parametrize("scale_center", [True, False])
def test_fused_call_matches_keras_values_and_moving_statistics(shape, scale_center):
  model = _bn_model(shape, scale=scale_center, center=scale_center)
  x = tf.constant(np.random.default_rng(2).normal(1.0, 2.0, (8,) + shape), tf.float32)

  def call(x):
    return functional.functional_call(model, {}, x, training=True, return_state=True)

  assert "FusedBatchNormV3" in _ops(call, x)
  assert not fused_norm.is_active()
  with fused_norm.fused_batch_norm_scope():
    assert fused_norm.is_active()
    with fused_norm.disabled():
      assert not fused_norm.is_active()
  y, state = call(x)
  def unfused(x):  # The switch counts where it is entered: inside the traced function.
    with fused_norm.disabled():
      return call(x)

  assert "FusedBatchNormV3" not in _ops(unfused, x)
  with fused_norm.disabled():
    y_ref, state_ref = call(x)
  np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-5)
  for path in ("bn/moving_mean", "bn/moving_variance"):
    np.testing.assert_allclose(state[path].numpy(), state_ref[path].numpy(), rtol=1e-6)
  # The model's own variables are untouched (the state is returned, not assigned).
  assert not np.allclose(model.get_layer("bn").moving_mean.numpy(),
                         state["bn/moving_mean"].numpy())


@pytest.mark.parametrize("case", [
    "float64", "inference", "channels_first", "mask",
    pytest.param("renorm", marks=supported.requires_keras("3.14", "BatchNormalization(renorm=...)"))])
def test_other_calls_run_keras_own_code(case):
  dtype = "float64" if case == "float64" else "float32"
  kwargs = {"axis": 1} if case == "channels_first" else {}
  if case == "renorm":
    kwargs["renorm"] = True
  model = _bn_model((3, 4, 5), dtype, **kwargs)
  x = tf.constant(np.random.default_rng(3).normal(size=(4, 3, 4, 5)), dtype)
  training = case != "inference"

  if case == "mask":  # Called directly: a mask has no functional_call argument.
    layer, mask = model.get_layer("bn"), tf.ones([4, 3, 4], tf.bool)

    def call(x):
      with fused_norm.fused_batch_norm_scope():
        return layer(x, training=True, mask=mask)
  else:
    def call(x):
      return functional.functional_call(model, {}, x, training=training)

  assert "FusedBatchNormV3" not in _ops(call, x)
  y = call(x)
  with fused_norm.disabled():
    y_ref = call(x)
  np.testing.assert_array_equal(y.numpy(), y_ref.numpy())


def _meta_gradient(dtype, weights):
  """One MAML step (inner SGD step of 0.4 on a batch, loss after it at the fast weights)
  through conv -> BatchNorm -> ReLU -> pool -> conv -> BatchNorm -> dense, in ``dtype``;
  returns the loss after the step, the inner gradient and the meta-gradient (second
  order), as float64."""
  keras.utils.set_random_seed(0)
  model = keras.Sequential([
      keras.Input((12, 12, 1), dtype=dtype),
      keras.layers.Conv2D(6, 3, padding="same", name="c1", dtype=dtype),
      keras.layers.BatchNormalization(name="b1", dtype=dtype),
      keras.layers.ReLU(dtype=dtype), keras.layers.MaxPool2D(dtype=dtype),
      keras.layers.Conv2D(6, 3, name="c2", dtype=dtype),
      keras.layers.BatchNormalization(name="b2", dtype=dtype),
      keras.layers.Flatten(dtype=dtype), keras.layers.Dense(3, name="d", dtype=dtype)])
  w = {p: tf.constant(v, dtype) for p, v in weights.items()}
  rng = np.random.default_rng(4)
  x = tf.constant(rng.random((6, 12, 12, 1)), dtype)
  y = tf.constant(np.arange(6) % 3)

  def loss_at(params):
    out = functional.functional_call(model, params, x, training=True)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, out))

  with tf.GradientTape() as outer:
    outer.watch(list(w.values()))
    with tf.GradientTape() as inner:
      inner.watch(list(w.values()))
      loss = loss_at(w)
    g = inner.gradient(loss, w)
    after = loss_at({p: w[p] - 0.4 * g[p] for p in w})
  meta = outer.gradient(after, w)
  as64 = lambda d: {p: d[p].numpy().astype(np.float64) for p in d}
  return float(after), as64(g), as64(meta)


def test_second_order_through_the_fused_kernel_matches_float64_exact():
  """The float32 fused meta-gradient against the float64 one (Keras' code with exact
  moments: no fused kernel in float64), relative to the largest entry."""
  keras.utils.set_random_seed(0)
  probe = keras.Sequential([
      keras.Input((12, 12, 1)), keras.layers.Conv2D(6, 3, padding="same", name="c1"),
      keras.layers.BatchNormalization(name="b1"), keras.layers.ReLU(),
      keras.layers.MaxPool2D(), keras.layers.Conv2D(6, 3, name="c2"),
      keras.layers.BatchNormalization(name="b2"), keras.layers.Flatten(),
      keras.layers.Dense(3, name="d")])
  rng = np.random.default_rng(5)
  weights = {p: (rng.normal(0, 0.5, v.shape) if "kernel" in p or "gamma" in p else
                 rng.normal(0, 0.1, v.shape)).astype(np.float32)
             for p, v in functional.variable_paths(probe, trainable=True).items()}
  loss32, g32, meta32 = _meta_gradient("float32", weights)
  loss64, g64, meta64 = _meta_gradient("float64", weights)
  with fused_norm.disabled():
    _, g32k, meta32k = _meta_gradient("float32", weights)

  def rel(a, b):
    return max(np.abs(a[p] - b[p]).max() for p in b) / max(np.abs(b[p]).max() for p in b)

  assert loss32 == pytest.approx(loss64, rel=1e-5)
  assert rel(g32, g64) < 1e-5 and rel(meta32, meta64) < 1e-5
  # As accurate as Keras' own (unfused, exact-moment) float32 path, within a factor.
  assert rel(meta32, meta64) < 10 * rel(meta32k, meta64) + 1e-6
  # Not trivially equal: the fused path really ran a different computation.
  assert rel(meta32, meta32k) > 0


def test_gradients_through_the_returned_moving_statistics():
  """TensorFlow gives the fused kernel's moment outputs no gradient; a loss through the
  returned state (an inference-mode pass on the adapted statistics) must still get the
  exact one, first and second order, as in float64 with Keras' code."""
  def run(dtype):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,), dtype=dtype),
                              keras.layers.Dense(4, name="d", dtype=dtype),
                              keras.layers.BatchNormalization(name="bn", momentum=0.5,
                                                              dtype=dtype)])
    rng = np.random.default_rng(6)
    kernel = tf.constant(rng.normal(size=(5, 4)), dtype)
    x, xq = (tf.constant(rng.normal(1.0, 2.0, (7, 5)), dtype) for _ in range(2))
    with tf.GradientTape() as outer:
      outer.watch(kernel)
      with tf.GradientTape() as inner:
        inner.watch(kernel)
        _, state = functional.functional_call(model, {"d/kernel": kernel}, x, training=True,
                                              return_state=True)
        yq = functional.functional_call(model, {"d/kernel": kernel}, xq, training=False,
                                        state=state)
        loss = tf.reduce_sum(tf.sin(yq))
      g = inner.gradient(loss, kernel)
      gg = tf.reduce_sum(g * g)
    return g.numpy().astype(np.float64), outer.gradient(gg, kernel).numpy().astype(np.float64)

  g32, h32 = run("float32")
  g64, h64 = run("float64")
  with fused_norm.disabled():
    g32k, _ = run("float32")
  scale = np.abs(g64).max()
  assert np.abs(g64).min() > 1e-3  # every entry depends on the statistics
  np.testing.assert_allclose(g32, g64, atol=1e-5 * scale)
  np.testing.assert_allclose(g32k, g64, atol=1e-5 * scale)
  np.testing.assert_allclose(h32, h64, atol=1e-4 * np.abs(h64).max())


def test_subclass_with_its_own_moments_runs_its_own_code():
  class ShiftedVarianceBN(keras.layers.BatchNormalization):
    def _moments(self, inputs, mask):
      mean, variance = super()._moments(inputs, mask)
      return mean, variance + 1.0

  keras.utils.set_random_seed(0)
  inputs = keras.Input((4, 4, 3))
  model = keras.Model(inputs, ShiftedVarianceBN(name="bn")(inputs))
  x = tf.constant(np.random.default_rng(7).normal(size=(5, 4, 4, 3)), tf.float32)

  def call(x):
    return functional.functional_call(model, {}, x, training=True, return_state=True)

  assert "FusedBatchNormV3" not in _ops(call, x)
  y, state = call(x)
  with fused_norm.disabled():
    y_ref, state_ref = call(x)
  np.testing.assert_array_equal(y.numpy(), y_ref.numpy())
  np.testing.assert_array_equal(state["bn/moving_variance"].numpy(),
                                state_ref["bn/moving_variance"].numpy())


@pytest.mark.parametrize("shape", [(1, 3), (1, 1, 1, 3)])
def test_one_value_per_channel_gives_zero_batch_variance(shape):
  model = _bn_model(shape[1:])
  x = tf.constant(np.random.default_rng(8).normal(size=shape), tf.float32)
  y, state = functional.functional_call(model, {}, x, training=True, return_state=True)
  with fused_norm.disabled():
    y_ref, state_ref = functional.functional_call(model, {}, x, training=True,
                                                  return_state=True)
  np.testing.assert_allclose(y.numpy(), y_ref.numpy(), atol=1e-6)
  np.testing.assert_allclose(state["bn/moving_variance"].numpy(),
                             state_ref["bn/moving_variance"].numpy(), rtol=1e-6)
