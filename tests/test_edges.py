"""Correct at the edges (issue 28): no silent first order through a gradient TensorFlow
cannot differentiate, sparse inner gradients, layer constraints, batched convolutions.

Every reference is computed without the code under test: float64 finite differences,
the same function written densely, constraints applied by hand, a loop of plain calls.
"""
import json
import os

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
def test_recomputed_second_order_refuses_it_too(compiled):
  """``recompute=True`` replays the inner steps in its own backward pass: the same
  refusal, before any replay (it went through the resize and dropped the term)."""
  keras.utils.set_random_seed(0)
  make_layer, op_type = RESIZES["user_layer_bilinear"]
  model = _resize_target(make_layer)
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.1,
                            inner_steps=2, recompute=True)
  with pytest.raises(inner_loop.MissingInnerGradientError) as e:
    _meta_gradient(learner, model, *_episode(), compiled)
  assert op_type in str(e.value) and "layer 'up'" in str(e.value)


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
    "MAML_recompute": lambda m: inner_loop.MAML(m, "sparse_softmax_cross_entropy",
                                                inner_lr=0.3, inner_steps=2, recompute=True),
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


# -- 4. layer constraints are applied to given weights ----------------------------------

EPS = 1e-7  # keras.backend.epsilon(), which Keras' constraints add to the norm


def _norm(w, axis):
  return np.sqrt(np.sum(w * w, axis=axis, keepdims=True))


BY_HAND = {
    "NonNeg": lambda w: w * (w >= 0),
    "MaxNorm": lambda w: w * np.clip(_norm(w, 0), 0, 0.7) / (EPS + _norm(w, 0)),
    "UnitNorm": lambda w: w / (EPS + _norm(w, (0, 1, 2))),
    "MinMaxNorm": lambda w: w * (0.6 * np.clip(_norm(w, 1), 0.5, 0.9)
                                 + 0.4 * _norm(w, 1)) / (EPS + _norm(w, 1)),
    None: lambda w: w,
}


def _constrained_target():
  """Every constraint class on some weight: Dense kernel NonNeg / bias MaxNorm(0.7),
  Conv2D kernel UnitNorm over its receptive field, Embedding rows MinMaxNorm."""
  C = keras.constraints
  ids = keras.Input((2,), dtype="int32", name="ids")
  image = keras.Input((4, 4, 2), dtype=F64, name="image")
  e = L.Embedding(5, 3, embeddings_constraint=C.MinMaxNorm(0.5, 0.9, rate=0.6, axis=1),
                  name="emb", dtype=F64)(ids)
  c = L.Conv2D(3, 3, kernel_constraint=C.UnitNorm(axis=[0, 1, 2]), activation="tanh",
               name="conv", dtype=F64)(image)
  h = L.Concatenate(dtype=F64)([L.Flatten(dtype=F64)(e), L.Flatten(dtype=F64)(c)])
  out = L.Dense(2, kernel_constraint=C.NonNeg(), bias_constraint=C.MaxNorm(0.7, axis=0),
                name="dense", dtype=F64)(h)
  return keras.Model([ids, image], out)


CONSTRAINED = {"emb/embeddings": "MinMaxNorm", "conv/kernel": "UnitNorm",
               "dense/kernel": "NonNeg", "dense/bias": "MaxNorm"}


def _constraint_case(seed=0):
  keras.utils.set_random_seed(seed)
  model = _constrained_target()
  rng = np.random.default_rng(seed)
  weights = {p: 1.5 * rng.normal(size=v.shape)
             for p, v in functional.variable_paths(model, trainable=True).items()}
  inputs = [tf.constant(rng.integers(0, 5, size=(3, 2)), tf.int32),
            tf.constant(rng.normal(size=(3, 4, 4, 2)))]
  return model, weights, inputs


@MODES
def test_constraints_project_given_weights_as_keras_would(compiled):
  model, weights, inputs = _constraint_case()
  assert np.any(weights["dense/kernel"] < 0)
  call = lambda w, x: functional.functional_call(model, w, x)
  call = tf.function(call) if compiled else call
  out = call({p: tf.constant(w) for p, w in weights.items()}, inputs)
  for p, w in weights.items():  # The reference: Keras' own call on hand-projected values.
    functional.variable_paths(model)[p].assign(BY_HAND[CONSTRAINED.get(p)](w))
  np.testing.assert_allclose(out.numpy(), model(inputs).numpy(), rtol=1e-12, atol=1e-14)


@MODES
def test_constraint_projection_is_differentiated(compiled):
  """d(loss)/d(given weight) through the projection: against central finite differences
  of the same loss with the projection done by hand in NumPy (away from its kinks)."""
  model, weights, inputs = _constraint_case(1)
  c = np.random.default_rng(2).normal(size=(3, 2))

  def loss_fn(w):
    with tf.GradientTape() as tape:
      w = {p: tf.convert_to_tensor(t) for p, t in w.items()}
      tape.watch(list(w.values()))
      loss = tf.reduce_sum(c * functional.functional_call(model, w, inputs))
    return loss, tape.gradient(loss, w)

  fn = tf.function(loss_fn) if compiled else loss_fn
  _, grads = fn(weights)
  variables = functional.variable_paths(model)

  def by_hand(w):
    for p, t in w.items():
      variables[p].assign(BY_HAND[CONSTRAINED.get(p)](t))
    return float(np.sum(c * model(inputs).numpy()))

  rng = np.random.default_rng(3)
  for p in CONSTRAINED:
    v = rng.normal(size=weights[p].shape)
    h = 1e-6
    plus = dict(weights, **{p: weights[p] + h * v})
    minus = dict(weights, **{p: weights[p] - h * v})
    fd = (by_hand(plus) - by_hand(minus)) / (2 * h)
    analytic = float(np.sum(grads[p].numpy() * v))
    assert abs(analytic - fd) <= 1e-7 * max(abs(fd), 1e-3), (p, analytic, fd)
  # NonNeg: no gradient reaches the negative entries (they are held at 0).
  assert np.all(grads["dense/kernel"].numpy()[weights["dense/kernel"] < 0] == 0)


@pytest.mark.parametrize("parallel", ["vectorized_map", "map_fn"])
def test_constraints_apply_to_generated_and_batched_weights(parallel):
  """A hypernetwork's (batched) weight sets run constrained: each set equals a plain
  Keras call on that set projected by hand."""
  from hypernet.hypernetworks import batched  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(4)
  C = keras.constraints
  model = keras.Sequential([
      keras.Input((4, 4, 2), dtype=F64),
      L.Conv2D(3, 3, kernel_constraint=C.UnitNorm(axis=[0, 1, 2]), activation="tanh",
               name="conv", dtype=F64),
      L.Flatten(dtype=F64),
      L.Dense(2, kernel_constraint=C.NonNeg(), bias_constraint=C.MaxNorm(0.7, axis=0),
              name="dense", dtype=F64)])
  rng = np.random.default_rng(4)
  variables = functional.variable_paths(model, trainable=True)
  sets = {p: tf.constant(1.5 * rng.normal(size=(2,) + tuple(v.shape)))
          for p, v in variables.items()}
  x = tf.constant(rng.normal(size=(3, 4, 4, 2)))
  out = batched.batched_functional_call(model, sets, x, shared_inputs=True,
                                        parallel=parallel)
  for s in range(2):
    for p, w in sets.items():
      variables[p].assign(BY_HAND[CONSTRAINED.get(p)](w[s].numpy()))
    np.testing.assert_allclose(out[s].numpy(), model(x).numpy(), rtol=1e-12, atol=1e-14)


def test_maml_adapts_through_the_constraint():
  """The inner loop's fast weights are projected in every call: one MAML step on a
  NonNeg kernel equals the step computed by hand on the projected kernel."""
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,), dtype=F64),
                            L.Dense(2, kernel_constraint=keras.constraints.NonNeg(),
                                    use_bias=False, name="head", dtype=F64)])
  w0 = np.array([[0.5, -0.4], [-0.2, 0.3], [0.1, -0.6]])
  model.get_layer("head").kernel.assign(w0)
  x = np.random.default_rng(0).normal(size=(4, 3))
  y = np.random.default_rng(1).normal(size=(4, 2))
  learner = inner_loop.MAML(model, "mse", inner_lr=0.1)
  fast, _ = learner.adapt(tf.constant(x), tf.constant(y))
  # By hand: L = mean((x P(w) - y)^2), dL/dw = mask * 2 x^T (x P(w) - y) / (4 * 2).
  mask = (w0 >= 0).astype(float)
  grad = mask * (2 * x.T @ (x @ (w0 * mask) - y) / y.size)
  w1 = w0 - 0.1 * grad
  np.testing.assert_allclose(fast["head/kernel"].numpy(), w1, rtol=1e-12)
  out = functional.functional_call(model, fast, tf.constant(x))
  np.testing.assert_allclose(out.numpy(), x @ (w1 * (w1 >= 0)), rtol=1e-12)


# -- 6. batched weight sets: every conv class works or names itself ---------------------

CONV_CLASSES = {
    "Conv1D": (lambda **k: L.Conv1D(3, 2, **k), (5, 2)),
    "Conv1D_causal": (lambda **k: L.Conv1D(3, 2, padding="causal", **k), (5, 2)),
    "Conv2D": (lambda **k: L.Conv2D(3, 2, strides=2, padding="same", **k), (5, 5, 2)),
    "Conv2D_groups": (lambda **k: L.Conv2D(4, 2, groups=2, **k), (5, 5, 2)),
    "Conv3D": (lambda **k: L.Conv3D(3, 2, **k), (4, 4, 4, 2)),
    "DepthwiseConv1D": (lambda **k: L.DepthwiseConv1D(2, **k), (5, 2)),
    "DepthwiseConv2D": (lambda **k: L.DepthwiseConv2D(2, depth_multiplier=2, **k), (5, 5, 2)),
    "SeparableConv1D": (lambda **k: L.SeparableConv1D(3, 2, **k), (5, 2)),
    "SeparableConv2D": (lambda **k: L.SeparableConv2D(3, 2, **k), (5, 5, 2)),
    "Conv1DTranspose": (lambda **k: L.Conv1DTranspose(3, 2, **k), (5, 2)),
    "Conv2DTranspose": (lambda **k: L.Conv2DTranspose(3, 2, strides=2, **k), (5, 5, 2)),
    "Conv3DTranspose": (lambda **k: L.Conv3DTranspose(3, 2, **k), (4, 4, 4, 2)),
}
# Where tf.vectorized_map has a batched form (the documented table in docs/layers.md).
VECTORISED = {
    "grouped": {"Conv1D", "Conv1D_causal", "Conv2D", "Conv2D_groups", "DepthwiseConv1D",
                "DepthwiseConv2D", "SeparableConv1D", "SeparableConv2D"},
    "im2col": {"Conv2D", "DepthwiseConv1D", "DepthwiseConv2D"},
}


def _grouped_gradient_runs(dtype):
  """The truth the probe must tell: a grouped convolution's gradient under a tape."""
  x, k = tf.ones([1, 3, 3, 4], dtype), tf.ones([2, 2, 2, 2], dtype)
  try:
    with tf.GradientTape() as tape:
      tape.watch([x, k])
      y = tf.nn.conv2d(x, k, 1, "VALID")
    return all(g is not None for g in tape.gradient(y, [x, k]))
  except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
    return False


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_grouped_conv_probe_tells_whether_the_gradient_runs(dtype, monkeypatch):
  from hypernet.hypernetworks import batched  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(batched, "_PROBED", {})
  truth = _grouped_gradient_runs(tf.as_dtype(dtype))
  assert batched.grouped_conv_available(dtype) == truth
  monkeypatch.setattr(batched, "_PROBED", {})
  traced = tf.function(lambda: tf.constant(batched.grouped_conv_available(dtype)))()
  assert bool(traced) == truth


@pytest.mark.parametrize("conv,dtype", [("auto", "float32"), ("grouped", "float32"),
                                        ("im2col", "float32"), ("auto", "float64")])
@pytest.mark.parametrize("name", sorted(CONV_CLASSES))
def test_every_conv_class_batched_equals_a_loop_or_names_the_layer(name, conv, dtype):
  from hypernet.hypernetworks import batched  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  make, shape = CONV_CLASSES[name]
  inputs = keras.Input(shape, dtype=dtype)
  model = keras.Model(inputs, L.Flatten(dtype=dtype)(
      make(activation="tanh", name="cv", dtype=dtype)(inputs)))
  rng = np.random.default_rng(0)
  weights = {p: tf.constant(rng.normal(size=(3,) + tuple(v.shape)), dtype)
             for p, v in functional.variable_paths(model, trainable=True).items()}
  x = tf.constant(rng.normal(size=(3, 2) + shape), dtype)
  effective = conv
  if conv == "auto":
    effective = "grouped" if _grouped_gradient_runs(tf.as_dtype(dtype)) else "im2col"
  elif conv == "grouped" and not _grouped_gradient_runs(tf.as_dtype(dtype)):
    # CPUs on which oneDNN is off: the forced form is refused in one line.
    with pytest.raises(ValueError, match=r"conv='grouped': .*TF_ENABLE_ONEDNN_OPTS=1"):
      batched.batched_functional_call(model, weights, x, conv=conv)
    return
  if name not in VECTORISED[effective]:
    with pytest.raises(NotImplementedError, match=rf"Layer 'cv' \({name.split('_')[0]},"):
      batched.batched_functional_call(model, weights, x, conv=conv)
    return
  c = tf.constant(rng.normal(size=(3, 2, model.output.shape[-1])), dtype)
  with tf.GradientTape() as tape:
    tape.watch(list(weights.values()))
    out = batched.batched_functional_call(model, weights, x, conv=conv)
    loss = tf.reduce_sum(c * out)
  grads = tape.gradient(loss, list(weights.values()))
  with tf.GradientTape() as tape:  # The reference: a loop of plain functional calls.
    tape.watch(list(weights.values()))
    ref = tf.stack([functional.functional_call(model, {p: w[s] for p, w in weights.items()},
                                               x[s]) for s in range(3)])
    ref_loss = tf.reduce_sum(c * ref)
  ref_grads = tape.gradient(ref_loss, list(weights.values()))
  tol = 1e-5 if dtype == "float32" else 1e-12
  np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=tol, atol=tol)
  for g, r in zip(grads, ref_grads):
    np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=tol, atol=tol)


# -- 3. finite and exact at edge inputs -------------------------------------------------

# Where the function itself is not differentiable at the edge (finite differences then
# measure a one-sided mixture): only finiteness is asserted there. "zero": every input
# of the layer under test is 0 (zero vectors, zero variance); "constant": every input is
# tanh(0.5) (zero variance, non-zero mean); "saturated": inputs x 1e3 and weights x 10
# (tanh at +-1, softmax / ELU far out).
NOT_SMOOTH = {
    "zero": {"MaxPooling2D": "max of ties", "GlobalMaxPooling1D": "max of ties",
             "PReLU": "kink at 0", "ELU_Softmax": "ELU'' jumps at 0",
             "UnitNormalization": "x/|x| is discontinuous at 0 (Keras: x/eps inside "
                                  "|x| < eps)"},
    "constant": {"MaxPooling2D": "max of ties", "GlobalMaxPooling1D": "max of ties"},
    "saturated": {"MaxPooling2D": "max of ties", "GlobalMaxPooling1D": "max of ties"},
}
EDGES = sorted(NOT_SMOOTH)


@pytest.fixture(scope="module")
def second_order_case():
  """``second_order_case(name)``: test_second_order's ``CASES[name]()`` built once under
  seed 0 for the four edges of that layer (the tests write nothing to it: the weights go
  in as arguments of functional_call; each edge takes its own copies of the values)."""
  from test_second_order import CASES  # pylint: disable=g-import-not-at-top
  built = {}

  def get(name):
    if name not in built:
      keras.utils.set_random_seed(0)
      built[name] = CASES[name]()
    return built[name]

  return get


def _edge_point(case, edge):
  model, x = case
  variables = functional.variable_paths(model)
  paths = list(functional.variable_paths(model, trainable=True))
  values = {p: variables[p].numpy() for p in paths}
  if edge != "saturated":
    x = np.zeros_like(x)               # ids: all 0 (one row repeated)
  elif np.issubdtype(x.dtype, np.floating):
    x = 1e3 * x                        # ids stay (the weights saturate)
  if edge == "constant":  # The first bias (the Dense before the layer): tanh(0.5) out.
    first_bias = next(p for p in paths if p.endswith("bias"))
    values[first_bias] = np.full_like(values[first_bias], 0.5)
  if edge == "saturated":
    values = {p: 10 * v for p, v in values.items()}
  return model, x, paths, np.concatenate([values[p].ravel() for p in paths])


# Central differences need a smaller step where the curvature is 1/eps-large, or where
# inputs x 1e3 make the step 1e3 times larger inside the layer (a recurrence of them).
STEP = {("RMSNormalization", "zero"): 1e-7, ("SimpleRNN", "saturated"): 1e-6}


@pytest.mark.parametrize("compiled,edge", [(False, e) for e in EDGES] + [(True, "zero")],
                         ids=[f"eager-{e}" for e in EDGES] + ["function-zero"])
@pytest.mark.parametrize("name", sorted(__import__("test_second_order").CASES))
def test_layers_finite_and_exact_at_edge_inputs(name, edge, compiled, second_order_case):
  """First and second order at the edges, against central finite differences (the
  rounding floor ``1e-12 |g| / h`` covers Hessians below what differences of a
  float64 gradient resolve, e.g. through saturated tanh)."""
  from test_second_order import TRAINING, _derivatives  # pylint: disable=g-import-not-at-top
  model, x, paths, w0 = _edge_point(second_order_case(name), edge)
  fn, v, first = _derivatives(model, x, paths, TRAINING.get(name, False), compiled,
                              with_first=True)
  loss, g, hv = fn(tf.constant(w0))
  for what, t in (("loss", loss), ("gradient", g), ("Hessian-vector product", hv)):
    assert np.all(np.isfinite(t.numpy())), (name, edge, what)
  if name in NOT_SMOOTH[edge]:
    return
  h = STEP.get((name, edge), 1e-5)
  lp, gp = first(tf.constant(w0) + h * v)  # (L, g) alone: their Hv would be discarded.
  lm, gm = first(tf.constant(w0) - h * v)
  fd_first = (lp - lm).numpy() / (2 * h)
  fd_second = (gp - gm).numpy() / (2 * h)
  gv = float(tf.reduce_sum(g * v))
  assert abs(gv - fd_first) <= 1e-6 * max(abs(gv), 1e-3), (name, edge, gv, fd_first)
  err = np.linalg.norm(hv.numpy() - fd_second)
  floor = 1e-12 * np.linalg.norm(g.numpy()) / h
  assert err <= 1e-6 * max(np.linalg.norm(fd_second), 1e-3) + floor, (
      name, edge, err, np.linalg.norm(fd_second), floor)


# -- 5. continual learning: normalisation state per task --------------------------------

@pytest.mark.parametrize("method", ["independent", "hnet"])
def test_batchnorm_statistics_are_per_task_and_independent_forgets_nothing(tmp_path, method):
  """With BatchNorm in the target, learning task 1 leaves task 0's statistics (and, for
  the independent networks, its accuracy) exactly as they were after task 0; task 0's
  network then equals a plain Keras model built from its weights and statistics."""
  from test_continual import _config  # pylint: disable=g-import-not-at-top
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top
  config = _config(method=method, steps=30, **{"model.batch_norm": True,
                                                "model.conv_widths": (8,),
                                                "checkpoint_every": 30})
  result = loop.train_and_evaluate(config, str(tmp_path))
  matrix = np.array(result["cl1/matrix"])
  if method == "independent":
    assert matrix[1, 0] == matrix[0, 0] and result["cl1/forgetting"] == 0.0, matrix
  ckpts = tmp_path / "checkpoints"
  after0 = tf.train.load_checkpoint(str(ckpts / "ckpt-30"))
  after1 = tf.train.load_checkpoint(str(ckpts / "ckpt-60"))
  names = [n for n, _ in tf.train.list_variables(str(ckpts / "ckpt-60"))
           if n.startswith("continual/task_stats/") and "OPTIMIZER" not in n]
  assert len(names) == 2, names  # bn1's moving mean and variance, one row per task
  for n in names:
    np.testing.assert_array_equal(after1.get_tensor(n)[0], after0.get_tensor(n)[0])
    assert not np.array_equal(after1.get_tensor(n)[1], after0.get_tensor(n)[1]), n
  # Task 0 evaluated by Keras alone: its weights and statistics in a fresh target.
  trainer = loop.Trainer(config, str(tmp_path))
  trainer.restore()
  task = trainer.task
  weights = {p: w.numpy() for p, w in task.source.weights(tf.constant(0)).items()}
  stats = {p: v[0].numpy() for p, v in zip(task.task_stat_paths, task.state.task_stats)}
  plain = keras.models.clone_model(task.target)
  plain.build(task.target.inputs[0].shape)
  for p, v in functional.variable_paths(plain).items():
    if p in weights or p in stats:
      v.assign(weights.get(p, stats.get(p)))
  data = task.eval_tasks[0]
  x = data.x_test.astype(np.float32) * np.float32(data.pixel_scale)
  accuracy = np.mean(np.argmax(plain(x, training=False).numpy(), -1) == data.y_test)
  assert accuracy == pytest.approx(matrix[1, 0], abs=1e-6)


# -- 7. the main job across seeds: the sweep script --------------------------------------

def test_digits_seeds_table_and_command(tmp_path):
  """experiments/digits_seeds.py: the command it runs is the README's main job with a
  seed, and the table's errors / min / mean / max come from the accuracies."""
  from experiments import digits_seeds, seed_runs  # pylint: disable=g-import-not-at-top
  assert seed_runs.train_command(digits_seeds.CONFIG_NAME, str(tmp_path / "seed3"), 3)[1:] == [
      "-m", "hypernet.train", "--config=configs/digits_hyper.py",
      f"--workdir={tmp_path / 'seed3'}", "--config.seed=3"]
  text = digits_seeds.table({0: {"accuracy": 354 / 359, "wall_time_sec": 30.0},
                             3: {"accuracy": 347 / 359, "wall_time_sec": 70.0}})
  assert "| 0 | 98.61 | 1.39 | 5 | 30 |" in text and "| 3 | 96.66 | 3.34 | 12 | 70 |" in text
  assert "| min / mean / max | 96.66 / 97.63 / 98.61 | 1.39 / 2.37 / 3.34 | | |" in text
  mnist = digits_seeds.table({1: {"accuracy": 0.9928, "wall_time_sec": 400.0}}, 10000)
  assert "| 1 | 99.28 | 0.72 | 72 | 400 |" in mnist and "errors (of 10,000)" in mnist


def test_digits_seeds_set_overrides_every_run(tmp_path, monkeypatch):
  """``--set FIELD=VALUE`` reaches every seed's command as ``--config.FIELD=VALUE`` (the
  direct baseline run at the main job's schedule), after the seed."""
  from experiments import digits_seeds, seed_runs  # pylint: disable=g-import-not-at-top
  commands = []

  def fake_run(command, cwd, check):
    commands.append(command)
    workdir = next(a.split("=", 1)[1] for a in command if a.startswith("--workdir="))
    os.makedirs(workdir)
    with open(os.path.join(workdir, "final_metrics.json"), "w") as f:
      json.dump({"accuracy": 0.98, "wall_time_sec": 1.0}, f)

  monkeypatch.setattr(seed_runs.subprocess, "run", fake_run)
  digits_seeds.main(["--config=digits_plain", f"--out={tmp_path}", "--seeds=0,4",
                     "--set=num_steps=10000", "--set=model.dropout=0.2"])
  assert [c[2:] for c in commands] == [
      ["hypernet.train", "--config=configs/digits_plain.py", f"--workdir={tmp_path / f'seed{s}'}",
       f"--config.seed={s}", "--config.num_steps=10000", "--config.model.dropout=0.2"]
      for s in (0, 4)]
  assert "| 4 | 98.00 |" in (tmp_path / "seeds.md").read_text()
