"""Bias additions as plain adds in the meta-learners' functional calls (hypernet/numerics/plain_bias.py).

Checks: no ``BiasAdd`` in a traced call within the scope while Keras' own call and a
plain functional call keep it; the
same outputs and gradients as Keras' own call; Keras' dtype promotion kept; and the
regression it exists for: Meta-SGD on a BatchNorm conv4 target trains, with no
``BiasAdd`` / ``BiasAddGrad`` left in the Trainer's graph for oneDNN to merge into a
cycle.
"""
import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.numerics import plain_bias
from hypernet.training import loop

from test_meta_tasks import _digits_config


def _op_types(concrete) -> collections.Counter:
  graph = concrete.graph.as_graph_def()
  types = collections.Counter(n.op for n in graph.node)
  for f in graph.library.function:
    types.update(n.op for n in f.node_def)
  return types


def _weights(model):
  return {p: tf.convert_to_tensor(v) for p, v in functional.variable_paths(
      model, trainable=True).items()}


def _model():
  keras.utils.set_random_seed(0)
  return keras.Sequential([
      keras.Input((6, 6, 2)),
      keras.layers.Conv2D(3, 3, padding="same", name="conv"),
      keras.layers.Flatten(),
      keras.layers.Dense(4, name="dense")])


def test_meta_learners_calls_have_no_bias_add_other_calls_keep_it():
  model = _model()
  x = tf.random.stateless_normal([2, 6, 6, 2], (1, 2))
  weights = _weights(model)
  own = tf.function(lambda: model(x)).get_concrete_function()
  plain = tf.function(lambda: functional.functional_call(model, weights, x)).get_concrete_function()
  ours = tf.function(lambda: functional.functional_call(
      model, weights, x, accelerate="meta")).get_concrete_function()
  assert _op_types(own)["BiasAdd"] == 2  # Keras' backend picks BiasAdd for both biases.
  assert _op_types(plain)["BiasAdd"] == 2  # Hypernetwork training: Keras' own add.
  assert _op_types(ours)["BiasAdd"] == 0 and _op_types(ours)["AddV2"] >= 2
  assert not plain_bias.is_active()  # Only inside the call.


def test_same_outputs_and_gradients_as_keras_own_call():
  model = _model()
  x = tf.random.stateless_normal([2, 6, 6, 2], (3, 4))
  weights = _weights(model)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(list(weights.values()))
    ours = functional.functional_call(model, weights, x, accelerate="meta")
    own = model(x)
    loss_ours, loss_own = tf.reduce_sum(ours ** 2), tf.reduce_sum(own ** 2)
  np.testing.assert_allclose(ours.numpy(), own.numpy(), rtol=1e-6, atol=1e-6)
  for path, v in zip(weights, model.trainable_variables):
    g_ours = tape.gradient(loss_ours, weights[path])
    g_own = tape.gradient(loss_own, v)
    np.testing.assert_allclose(g_ours.numpy(), g_own.numpy(), rtol=1e-5, atol=1e-6,
                               err_msg=path)
  # The bias gradient is the upstream gradient summed over batch and space.
  with tf.GradientTape() as tape:
    tape.watch(weights["conv/bias"])
    out = functional.functional_call(model, weights, x, accelerate="meta")
  grad = tape.gradient(out, weights["conv/bias"])
  np.testing.assert_allclose(grad.numpy(), np.zeros(3) + tape_free_bias_grad(model, x),
                             rtol=1e-5)


def tape_free_bias_grad(model, x):
  """d sum(dense(flatten(conv(x)))) / d conv bias, by hand: each conv channel's bias
  reaches every spatial position, each of which feeds the dense outputs through its
  kernel rows: the sum of the dense kernel's rows of that channel, times 2 examples."""
  kernel = model.get_layer("dense").kernel.numpy().reshape(6, 6, 3, 4)
  return 2.0 * kernel.sum(axis=(0, 1, 3))


def test_keras_dtype_promotion_is_kept():
  with plain_bias.plain_bias_scope():
    assert plain_bias.is_active()
    y = keras.ops.add(tf.ones([2, 3], tf.float16), 1.5)  # Python float: weak type.
    z = keras.ops.add(tf.ones([2, 3], tf.int32), tf.ones([3], tf.float32))
  assert y.dtype == tf.float16 and float(y[0, 0]) == 2.5
  assert z.dtype == tf.float32 and float(z[1, 2]) == 2.0


def test_same_values_and_shapes_as_keras_own_add_where_its_bias_add_shortcut_applies():
  """Keras' shortcut picks the bias axis from shapes alone ([3, 3] + [3, 1] adds along
  the last axis, not as numpy would); the scope reproduces Keras, not numpy. Lists are
  converted as Keras converts them. Where Keras' own add refuses the shapes (Keras >= 3.16
  dropped the shortcut for some of them), the scope refuses them too."""
  rng = np.random.default_rng(0)
  cases = [([3, 3], [3, 1]), ([4, 3, 3], [3, 1]), ([2, 3, 1, 1], [3]), ([4, 3], [1, 1, 3]),
           ([2, 3, 4, 5], [3]), ([2, 3], [3, 1]), ([2, 5, 5, 4], [1, 1, 1, 4]),
           ([2, 4, 5, 5], [1, 4, 1, 1]), ([2, 3], [2, 3])]
  for a, b in cases:
    x1 = tf.constant(rng.normal(size=a), tf.float32)
    x2 = tf.constant(rng.normal(size=b), tf.float32)
    try:
      own = keras.ops.add(x1, x2)
    except (tf.errors.InvalidArgumentError, ValueError) as e:
      with pytest.raises(type(e)), plain_bias.plain_bias_scope():
        keras.ops.add(x1, x2)
      continue
    with plain_bias.plain_bias_scope():
      ours = keras.ops.add(x1, x2)
    assert ours.shape == own.shape, (a, b)
    np.testing.assert_allclose(ours.numpy(), own.numpy(), rtol=1e-6, err_msg=str((a, b)))
  with plain_bias.plain_bias_scope():
    y = keras.ops.add(tf.ones([2, 3]), [1.0, 2.0, 3.0])
    z = keras.ops.add((1, 2, 3), tf.ones([2, 3]))
  np.testing.assert_array_equal(y.numpy(), [[2.0, 3.0, 4.0]] * 2)
  assert z.dtype == tf.float32 and float(z[1, 2]) == 4.0


def test_einsum_dense_bias_matches_keras_own_call():
  keras.utils.set_random_seed(1)
  model = keras.Sequential([keras.Input((3, 5)), keras.layers.EinsumDense(
      "abc,cde->abde", output_shape=(3, 4, 4), bias_axes="d",
      bias_initializer="random_normal")])
  x = tf.random.stateless_normal([2, 3, 5], (5, 6))
  ours = functional.functional_call(model, _weights(model), x, accelerate="meta")
  np.testing.assert_allclose(ours.numpy(), model(x).numpy(), rtol=1e-6, atol=1e-6)


def test_half_precision_keeps_bias_add():
  """A float16 Sum loses ~1% of a conv bias gradient; BiasAddGrad sums in float32."""
  def add(x, b):  # the scope counts where it is entered: inside the traced function
    with plain_bias.plain_bias_scope():
      return keras.ops.add(x, b)

  f = tf.function(add)
  half = f.get_concrete_function(tf.TensorSpec([2, 4, 4, 3], tf.float16),
                                 tf.TensorSpec([3], tf.float16))
  single = f.get_concrete_function(tf.TensorSpec([2, 4, 4, 3], tf.float32),
                                   tf.TensorSpec([3], tf.float32))
  assert _op_types(half)["BiasAdd"] == 1
  assert _op_types(single)["BiasAdd"] == 0 and _op_types(single)["AddV2"] == 1


def test_metasgd_on_a_batchnorm_conv4_trains_without_a_graph_cycle(tmp_path):
  """Before plain adds, this first step failed with "N nodes in a cycle" in about one
  process in two with Grappler off (one in four with it on): oneDNN merged the conv
  bias gradient into the filter gradient across Meta-SGD's per-task loop."""
  c = _digits_config()
  c.meta.learner = "metasgd"
  options = tf.config.optimizer.get_experimental_options()
  tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
  try:
    trainer = loop.Trainer(c, str(tmp_path))
    iterator = trainer.train_iterator(0)
    types = _op_types(trainer._train_steps.get_concrete_function(  # pylint: disable=protected-access
        iterator, tf.constant(2, tf.int64)))
    assert types["Conv2DBackpropFilter"] > 0
    assert types["BiasAdd"] == 0 and types["BiasAddGrad"] == 0
    totals, first_bad = trainer.train_chunk(iterator, 2)
  finally:
    tf.config.optimizer.set_experimental_options(
        {"disable_meta_optimizer": options.get("disable_meta_optimizer", False)})
  assert first_bad == -1 and np.isfinite(float(totals["loss"]))
