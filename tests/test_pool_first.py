"""Conv -> bias -> ReLU -> 2x2 max-pool computed pool first (hypernet/numerics/pool_first.py).

Checks, in traced functional calls with ``accelerate="meta"`` against the same calls
with the fused blocks off (TensorFlow's own ops in Keras' order): the graph computes
the bias and the ReLU on the pooled tensor; the values are equal bit for bit; the
kernels' gradients are equal bit for bit and the biases' to rounding; float64 second
derivatives (Hessian-vector products) agree; a hand-computed block; what is not
rewritten (other pools, a BatchNorm's offset, Dense layers, eager calls); the
classification step's ``config.accelerate``.
"""
import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import hypernet as hn
from hypernet import config_lib
from hypernet.core import functional
from hypernet.data import base as data_base
from hypernet.numerics import accel, pool_first
from hypernet.tasks import classification, targets


def _relu_shapes(concrete):
  """``Counter`` of the shapes of every ``Relu`` in the traced graph."""
  shapes = collections.Counter()
  for op in concrete.graph.get_operations():
    if op.type == "Relu":
      shapes[tuple(op.outputs[0].shape.as_list())] += 1
  return shapes


def _model(dtype, **kw):
  keras.utils.set_random_seed(0)
  return targets.make_cnn((12, 12, 1), 4, conv_widths=(3, 5), dense_widths=(6,),
                          dtype=dtype, **kw)


def _step(model, x, labels, around=None):
  """A traced ``(loss, gradients)`` of the model called functionally with
  ``accelerate="meta"`` (inside ``around()`` when given)."""
  def fn(weights):
    with (around() if around else accel.scope(True)):
      with tf.GradientTape() as tape:
        tape.watch(weights)
        logits = hn.functional_call(model, weights, x, training=True, accelerate="meta")
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    return logits, loss, tape.gradient(loss, weights)
  return tf.function(fn)


def _inputs(dtype, n=8):
  rng = np.random.default_rng(1)
  return (tf.constant(rng.normal(size=(n, 12, 12, 1)), dtype),
          tf.constant(np.arange(n) % 4, tf.int32))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bias_op", ["BiasAdd", "AddV2"])
def test_values_equal_and_bias_relu_on_the_pooled_tensor(dtype, bias_op):
  model = _model(dtype)
  weights = {p: tf.convert_to_tensor(v) for p, v in functional.variable_paths(model).items()}
  x, labels = _inputs(dtype)
  # accelerate="meta" adds biases as plain broadcast adds (AddV2); BiasAdd without them.
  keep_bias_add = (lambda: accel.disabled("plain_bias")) if bias_op == "BiasAdd" else None
  ref_around = ((lambda: accel.disabled("plain_bias", "fused_blocks")) if keep_bias_add
                else (lambda: accel.disabled("fused_blocks")))
  ours, ref = _step(model, x, labels, keep_bias_add), _step(model, x, labels, ref_around)
  c_ours, c_ref = ours.get_concrete_function(weights), ref.get_concrete_function(weights)
  # Keras' order: ReLU on [8, 12, 12, 3] and [8, 6, 6, 5]; pool first: on the pooled
  # [8, 6, 6, 3] and [8, 3, 3, 5] (the full-size ones stay in the graph, unread).
  assert _relu_shapes(c_ref) == {(8, 12, 12, 3): 1, (8, 6, 6, 5): 1, (8, 6): 1}
  assert _relu_shapes(c_ours) == {(8, 12, 12, 3): 1, (8, 6, 6, 3): 1, (8, 6, 6, 5): 1,
                                  (8, 3, 3, 5): 1, (8, 6): 1}
  types = collections.Counter(op.type for op in c_ours.graph.get_operations())
  assert types["BiasAdd" if bias_op == "BiasAdd" else "AddV2"] >= 4, types
  (logits, loss, grads), (ref_logits, ref_loss, ref_grads) = ours(weights), ref(weights)
  np.testing.assert_array_equal(logits.numpy(), ref_logits.numpy())
  assert float(loss) == float(ref_loss)
  eps = np.finfo(dtype).eps
  for p in weights:
    if p.endswith("kernel"):  # the same values routed to the same places
      np.testing.assert_array_equal(grads[p].numpy(), ref_grads[p].numpy(), err_msg=p)
    else:                     # the same sum over the pooled tensor: rounding
      np.testing.assert_allclose(grads[p].numpy(), ref_grads[p].numpy(), rtol=0,
                                 atol=64 * eps * np.abs(ref_grads[p].numpy()).max(),
                                 err_msg=p)


def test_float64_hessian_vector_products_match_keras_order():
  """Second derivatives (MAML's meta-gradient needs them) through the pooled block equal
  those through TensorFlow's ops in Keras' order."""
  model = _model("float64")
  weights = {p: tf.convert_to_tensor(v) for p, v in functional.variable_paths(model).items()}
  rng = np.random.default_rng(2)
  direction = {p: tf.constant(rng.normal(size=w.shape), tf.float64) for p, w in weights.items()}
  x, labels = _inputs("float64")

  def hvp(weights):
    with tf.GradientTape() as outer:
      outer.watch(weights)
      with tf.GradientTape() as inner:
        inner.watch(weights)
        logits = hn.functional_call(model, weights, x, training=True, accelerate="meta")
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
      grads = inner.gradient(loss, weights)
      dot = tf.add_n([tf.reduce_sum(grads[p] * direction[p]) for p in weights])
    return outer.gradient(dot, weights)

  def hvp_keras_order(weights):
    with accel.disabled("fused_blocks"):
      return hvp(weights)

  ours, ref = tf.function(hvp), tf.function(hvp_keras_order)
  assert (8, 6, 6, 3) in _relu_shapes(ours.get_concrete_function(weights))
  got, want = ours(weights), ref(weights)
  for p in weights:
    scale = np.abs(want[p].numpy()).max()
    assert scale > 0, p
    np.testing.assert_allclose(got[p].numpy(), want[p].numpy(), rtol=0, atol=1e-12 * scale,
                               err_msg=p)


def test_hand_computed_block():
  """One channel, one 2x2 window: relu(max(z) + b) and the gradient to the largest z."""
  layer = keras.layers.MaxPooling2D(2)
  z = tf.constant([[[[1.0], [-3.0]], [[0.5], [2.0]]]], tf.float64)   # [1, 2, 2, 1]
  b = tf.constant([-1.5], tf.float64)

  @tf.function
  def block(z, b):
    with tf.GradientTape() as tape:
      tape.watch([z, b])
      conv = tf.nn.conv2d(z, tf.ones([1, 1, 1, 1], tf.float64), 1, "VALID")  # z itself
      y = pool_first.pooled_block(layer, tf.nn.relu(tf.nn.bias_add(conv, b)))
      total = tf.reduce_sum(3.0 * y)
    return y, tape.gradient(total, [z, b])

  y, (dz, db) = block(z, b)
  np.testing.assert_array_equal(y.numpy().ravel(), [0.5])        # relu(2 - 1.5)
  np.testing.assert_array_equal(dz.numpy().ravel(), [0, 0, 0, 3.0])
  np.testing.assert_array_equal(db.numpy(), [3.0])
  y, (dz, db) = block(z, tf.constant([-2.5], tf.float64))         # relu(-0.5) = 0
  np.testing.assert_array_equal(y.numpy().ravel(), [0.0])
  np.testing.assert_array_equal(dz.numpy().ravel(), [0, 0, 0, 0])
  np.testing.assert_array_equal(db.numpy(), [0.0])


@pytest.mark.parametrize("case", ["pool3", "same", "strides1", "avg", "batch_norm",
                                  "dense"])
def test_not_rewritten(case):
  """Other pools, a BatchNorm's offset (float64: Keras' own BatchNorm, whose last op
  adds its per-channel beta), a Dense layer's ReLU: Keras' order, one ReLU in the graph."""
  keras.utils.set_random_seed(3)
  layers = [keras.Input((6, 6, 2), dtype="float64")]
  if case == "dense":
    layers.append(keras.layers.Dense(3, name="dense_in"))
  else:
    layers.append(keras.layers.Conv2D(3, 3, padding="same", name="conv"))
  if case == "batch_norm":
    layers.append(keras.layers.BatchNormalization(name="bn"))
  layers.append(keras.layers.ReLU())
  layers.append({"pool3": keras.layers.MaxPooling2D(3),
                 "same": keras.layers.MaxPooling2D(2, padding="same"),
                 "strides1": keras.layers.MaxPooling2D(2, strides=1),
                 "avg": keras.layers.AveragePooling2D(2)}.get(case, keras.layers.MaxPooling2D(2)))
  layers += [keras.layers.Flatten(), keras.layers.Dense(2, name="head")]
  model = keras.Sequential(layers)
  weights = {p: tf.convert_to_tensor(v) for p, v in functional.variable_paths(model).items()}
  x = tf.constant(np.random.default_rng(4).normal(size=(4, 6, 6, 2)), tf.float64)
  call = lambda w: hn.functional_call(model, w, x, training=True, accelerate="meta")
  shapes = _relu_shapes(tf.function(call).get_concrete_function(weights))
  assert shapes == {(4, 6, 6, 3): 1}, shapes   # the block's own ReLU only


def test_eager_calls_are_not_rewritten():
  """Eagerly the full-size ReLU has already run: nothing to save, Keras' pool runs."""
  z = tf.constant(np.random.default_rng(5).normal(size=(2, 4, 4, 3)), tf.float32)
  conv = tf.nn.conv2d(z, tf.ones([1, 1, 3, 3]), 1, "VALID")
  relu = tf.nn.relu(tf.nn.bias_add(conv, tf.constant([0.1, -0.2, 0.3])))
  assert pool_first.pooled_block(keras.layers.MaxPooling2D(2), relu) is None


@pytest.mark.parametrize("value", ["default", "meta", "off"])
def test_classification_step_follows_config_accelerate(value):
  """``config.accelerate`` reaches the Trainer's classification step: ``"meta"`` pools
  first and adds the target's biases without ``BiasAdd``; ``"default"`` and ``"off"``
  keep Keras' bias adds and order (no BatchNorm here for them to differ on); the forward
  values are the same bit for bit."""
  rng = np.random.default_rng(6)
  data = data_base.ImageClassificationData(
      name="random", x_train=rng.integers(0, 256, (16, 8, 8, 1)).astype(np.uint8),
      y_train=rng.integers(0, 4, 16), x_test=rng.integers(0, 256, (8, 8, 8, 1)).astype(np.uint8),
      y_test=rng.integers(0, 4, 8), num_classes=4, pixel_scale=1 / 255.0)
  c = config_lib.base_config()
  c.model.conv_widths, c.model.dense_widths = (3, 5), (6,)
  c.hypernet.kind = "chunked"
  c.hypernet.chunk_size = 64
  losses, bias_adds = {}, {}
  for v in ("default", value):
    c.accelerate = v
    keras.utils.set_random_seed(0)
    task = classification.ClassificationTask(c, data)
    batch = {"image": tf.constant(data.x_train[:16], tf.float32) * data.pixel_scale,
             "label": tf.constant(data.y_train[:16])}
    step = tf.function(lambda b, task=task: task.train_loss(b, 16)[0])
    concrete = step.get_concrete_function(batch)
    losses[v] = float(step(batch))
    shapes = _relu_shapes(concrete)
    bias_adds[v] = collections.Counter(op.type for op in concrete.graph.get_operations())[
        "BiasAdd"]
    pooled = (16, 4, 4, 3) in shapes   # conv1's block after the pool: ReLU on [16, 4, 4, 3]
    assert pooled == (v == "meta"), (v, shapes)
  assert losses[value] == losses["default"]
  # The target's 4 bias adds are plain adds in "meta" (the generator's own stay BiasAdd).
  assert bias_adds[value] == bias_adds["default"] - (4 if value == "meta" else 0), bias_adds
