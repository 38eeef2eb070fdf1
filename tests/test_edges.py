"""Correct at the edges (issue 28): no silent first order through a gradient TensorFlow
cannot differentiate, sparse inner gradients, layer constraints, batched convolutions.

Every reference is computed without the code under test: float64 finite differences,
the same function written densely, constraints applied by hand, a loop of plain calls.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.meta import anil, inner_loop, support_hypernet
from hypernet.numerics import second_order

F64 = "float64"
L = keras.layers
MODES = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "function"])


def _meta_gradient(learner, model, sx, sy, qx, qy, compiled, extra=()):
  """(query loss after adaptation, its gradient w.r.t. the target's variables + extra)."""
  sources = list(model.trainable_variables) + list(extra)

  def step(sx, sy, qx, qy):
    with tf.GradientTape() as tape:
      fast, _ = learner.adapt(sx, sy)
      loss = learner.loss_fn(qy, functional.functional_call(model, fast, qx))
    return loss, tape.gradient(loss, sources)

  fn = tf.function(step) if compiled else step
  return fn(sx, sy, qx, qy)


# -- 1. no silent first order through a non-differentiable gradient ---------------------

class _UserResize(L.Layer):
  """A user's own layer: tf.image.resize in its call (no Keras resizing class)."""

  def __init__(self, method, **kwargs):
    super().__init__(**kwargs)
    self.method = method

  def call(self, x):
    return tf.image.resize(x, (6, 6), method=self.method)


RESIZES = {
    "lambda_tf_image_bilinear": (lambda: L.Lambda(lambda t: tf.image.resize(t, (6, 6)),
                                                  name="up"), "ResizeBilinearGrad"),
    "lambda_keras_ops_bilinear": (lambda: L.Lambda(
        lambda t: keras.ops.image.resize(t, (6, 6)), name="up"), "ResizeBilinearGrad"),
    "user_layer_bilinear": (lambda: _UserResize("bilinear", name="up"), "ResizeBilinearGrad"),
    "user_layer_nearest": (lambda: _UserResize("nearest", name="up"),
                           "ResizeNearestNeighborGrad"),
}


def _resize_target(make_layer, dtype=F64):
  inputs = keras.Input((4, 4, 1), dtype=dtype)
  h = L.Conv2D(2, 3, padding="same", activation="tanh", name="conv", dtype=dtype)(inputs)
  h = make_layer()(h)
  h = L.Flatten(dtype=dtype)(h)
  return keras.Model(inputs, L.Dense(3, name="head", dtype=dtype)(h))


def _episode(dtype=F64):
  rng = np.random.default_rng(0)
  return (tf.constant(rng.normal(size=(6, 4, 4, 1)), dtype), tf.constant([0, 1, 2] * 2),
          tf.constant(rng.normal(size=(6, 4, 4, 1)), dtype), tf.constant([2, 1, 0] * 2))


@MODES
@pytest.mark.parametrize("learner_cls", [inner_loop.MAML, inner_loop.MetaSGD])
@pytest.mark.parametrize("where", sorted(RESIZES))
def test_second_order_refuses_a_gradient_tensorflow_cannot_differentiate(where, learner_cls,
                                                                         compiled):
  keras.utils.set_random_seed(0)
  make_layer, op_type = RESIZES[where]
  model = _resize_target(make_layer)
  learner = learner_cls(model, "sparse_softmax_cross_entropy", inner_lr=0.1)
  with pytest.raises(inner_loop.MissingInnerGradientError) as e:
    _meta_gradient(learner, model, *_episode(), compiled)
  message = str(e.value)
  assert op_type in message and "layer 'up'" in message and "first_order=True" in message


@MODES
def test_first_order_learners_accept_the_same_targets(compiled):
  keras.utils.set_random_seed(0)
  model = _resize_target(RESIZES["lambda_tf_image_bilinear"][0])
  learner = inner_loop.FirstOrderMAML(model, "sparse_softmax_cross_entropy", inner_lr=0.1)
  loss, grads = _meta_gradient(learner, model, *_episode(), compiled)
  assert np.isfinite(float(loss)) and all(g is not None for g in grads)


def test_anil_head_after_the_resize_is_exact_and_accepted():
  """ANIL differentiates twice only through its head: a resize in the body is not on the
  inner gradient's path, so nothing is refused (and the meta-gradient of the head
  matches finite differences of the meta-loss)."""
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4, 4, 1), dtype=F64),
                            L.Conv2D(2, 3, activation="tanh", name="conv", dtype=F64),
                            L.Lambda(lambda t: tf.image.resize(t, (6, 6)), name="up"),
                            L.Flatten(dtype=F64), L.Dense(3, name="head", dtype=F64)])
  learner = anil.ANIL(model, "sparse_softmax_cross_entropy", inner_lr=0.5)
  sx, sy, qx, qy = _episode()
  kernel = model.get_layer("head").kernel
  _, grads = _meta_gradient(learner, model, sx, sy, qx, qy, False)
  v = np.random.default_rng(3).normal(size=kernel.shape)
  w0 = kernel.numpy()

  def meta_loss(w):
    kernel.assign(w)
    fast, _ = learner.adapt(sx, sy)
    return float(learner.loss_fn(qy, functional.functional_call(model, fast, qx)))

  h = 1e-6
  fd = (meta_loss(w0 + h * v) - meta_loss(w0 - h * v)) / (2 * h)
  kernel.assign(w0)
  analytic = float(np.sum(grads[2].numpy() * v))
  assert abs(analytic - fd) <= 1e-7 * max(abs(fd), 1.0)


def _traced_inner_gradient(model, dtype):
  paths = list(functional.variable_paths(model, trainable=True))
  variables = functional.variable_paths(model)
  found = []

  @tf.function
  def fn(x):
    params = [tf.convert_to_tensor(variables[p].value) for p in paths]
    with tf.GradientTape() as tape:
      tape.watch(params)
      out = functional.functional_call(model, dict(zip(paths, params)), x, training=True)
      loss = tf.reduce_sum(tf.square(tf.cast(out, dtype)))
    grads = tape.gradient(loss, params)
    found.extend(second_order.nondifferentiable_gradient_ops(loss, params, grads))
    return [g for g in grads if g is not None]

  return fn, found


@pytest.mark.parametrize("name", ["Conv2D", "BatchNormalization", "LayerNormalization",
                                  "GroupNormalization", "UnitNormalization", "MaxPooling2D",
                                  "LSTM", "MultiHeadAttention", "Embedding", "PReLU",
                                  "ELU_Softmax", "SeparableConv2D", "Conv2DTranspose",
                                  "ZeroPadding_Cropping_UpSamplingNearest", "Dropout"])
def test_no_false_alarm_on_the_exact_layers(name):
  """The layers docs/layers.md lists as exact (their second order is checked against
  finite differences in test_second_order.py) have no such op in their inner gradient."""
  from test_second_order import CASES  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  model, x = CASES[name]()
  fn, found = _traced_inner_gradient(model, tf.float64)
  fn.get_concrete_function(tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)))
  assert found == []


def test_no_false_alarm_on_conv4_float32_fused_blocks():
  """float32 conv4 (fused BatchNorm, the fused norm-ReLU-pool block in the learners'
  calls): second-order MAML runs, eagerly and traced."""
  from hypernet.meta import conv4  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  model = conv4.make_conv4(3, (14, 14, 1), filters=4, num_blocks=2)
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.1)
  rng = np.random.default_rng(0)
  sx = tf.constant(rng.normal(size=(6, 14, 14, 1)), tf.float32)
  sy = tf.constant([0, 1, 2] * 2)
  for compiled in (False, True):
    loss, grads = _meta_gradient(learner, model, sx, sy, sx, sy, compiled)
    assert np.isfinite(float(loss)) and all(g is not None for g in grads)


# -- 2. sparse (IndexedSlices) inner gradients ------------------------------------------

def _embedding_target(sparse: bool, id_dtype="int32"):
  """ids [B, 3] -> Embedding(7, 4) -> tanh Dense -> head; with sparse=False the same
  function on one-hot inputs [B, 3, 7] through a bias-free Dense (its kernel = table)."""
  if sparse:
    first = [keras.Input((3,), dtype=id_dtype), L.Embedding(7, 4, name="emb", dtype=F64)]
  else:
    first = [keras.Input((3, 7), dtype=F64), L.Dense(4, use_bias=False, name="emb", dtype=F64)]
  return keras.Sequential(first + [
      L.Flatten(dtype=F64), L.Dense(5, activation="tanh", name="body", dtype=F64),
      L.Dense(3, name="head", dtype=F64)])


def _sparse_and_dense(learner_fn, id_dtype, compiled, seed=0):
  keras.utils.set_random_seed(seed)
  sparse = _embedding_target(True, id_dtype)
  dense = _embedding_target(False)
  for s, d in zip(sparse.trainable_variables, dense.trainable_variables):
    d.assign(s)
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, 7, size=(2, 6, 3))
  sy, qy = tf.constant([0, 1, 2] * 2), tf.constant([1, 2, 0] * 2)
  results = []
  for model, (sx, qx) in ((sparse, [tf.constant(i, id_dtype) for i in ids]),
                          (dense, [tf.constant(np.eye(7)[i]) for i in ids])):
    learner = learner_fn(model)
    extra = list(getattr(learner, "inner_lrs", {}).values())
    if isinstance(learner, support_hypernet.SupportHypernetwork):
      extra = learner.trainable_variables
    results.append(_meta_gradient(learner, model, sx, sy, qx, qy, compiled, extra))
  return results


LEARNERS = {
    "MAML": lambda m: inner_loop.MAML(m, "sparse_softmax_cross_entropy", inner_lr=0.3,
                                      inner_steps=2),
    "FOMAML": lambda m: inner_loop.FirstOrderMAML(m, "sparse_softmax_cross_entropy",
                                                  inner_lr=0.3, inner_steps=2),
    "MetaSGD": lambda m: inner_loop.MetaSGD(m, "sparse_softmax_cross_entropy", inner_lr=0.3),
    "MAML_embedding_only": lambda m: inner_loop.MAML(m, "sparse_softmax_cross_entropy",
                                                     inner_lr=0.3, adapt="emb/*"),
    "ANIL": lambda m: anil.ANIL(m, "sparse_softmax_cross_entropy", inner_lr=0.3),
    "SupportHypernetwork": lambda m: support_hypernet.SupportHypernetwork(
        m, "sparse_softmax_cross_entropy", inner_steps=1, inner_lr=0.3),
}


@MODES
@pytest.mark.parametrize("id_dtype", ["int32", "int64"])
@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_sparse_inner_gradients_give_the_dense_meta_gradient(learner, id_dtype, compiled):
  (loss_s, grads_s), (loss_d, grads_d) = _sparse_and_dense(LEARNERS[learner], id_dtype,
                                                           compiled)
  np.testing.assert_allclose(float(loss_s), float(loss_d), rtol=1e-12)
  assert len(grads_s) == len(grads_d)
  for gs, gd in zip(grads_s, grads_d):
    if gd is None:
      assert gs is None
      continue
    np.testing.assert_allclose(tf.convert_to_tensor(gs).numpy(), gd.numpy(), rtol=1e-9,
                               atol=1e-12)


@MODES
def test_sparse_maml_meta_gradient_matches_finite_differences(compiled):
  keras.utils.set_random_seed(1)
  model = _embedding_target(True, "int64")
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.5,
                            inner_steps=2)
  rng = np.random.default_rng(1)
  sx, qx = (tf.constant(rng.integers(0, 7, size=(6, 3)), tf.int64) for _ in range(2))
  sy, qy = tf.constant([0, 1, 2] * 2), tf.constant([1, 2, 0] * 2)
  _, grads = _meta_gradient(learner, model, sx, sy, qx, qy, compiled)
  table = model.get_layer("emb").embeddings
  w0 = table.numpy()
  v = rng.normal(size=w0.shape)

  def meta_loss(w):
    table.assign(w)
    fast, _ = learner.adapt(sx, sy)
    return float(learner.loss_fn(qy, functional.functional_call(model, fast, qx)))

  h = 1e-5
  fd = (meta_loss(w0 + h * v) - meta_loss(w0 - h * v)) / (2 * h)
  table.assign(w0)
  analytic = float(np.sum(tf.convert_to_tensor(grads[0]).numpy() * v))
  assert abs(analytic - fd) <= 1e-7 * max(abs(fd), 1.0), (analytic, fd)
