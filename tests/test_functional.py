"""functional_call: exact values, gradients, no writes, errors."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional


def _dense_1x1():
  return keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False, name="d")],
                          name="m")


def _scaled_kernel_loss(model, l):
  """Target y_hat = (l * w0) * x with w0 = 2, x = 3, y = 0: L = (6 l)^2, dL/dl = 72 l."""
  kernel = tf.reshape(l * 2.0, (1, 1))
  out = functional.functional_call(model, {"d/kernel": kernel}, tf.constant([[3.0]]))
  return tf.reduce_mean(tf.square(out - 0.0))


@pytest.mark.parametrize("mode", ["eager", "function", "jit"])
def test_dense_1x1_exact_loss_and_gradient(mode):
  model = _dense_1x1()
  before = model.get_weights()[0].copy()
  l = tf.Variable(0.1)

  def step():
    with tf.GradientTape() as tape:
      loss = _scaled_kernel_loss(model, l)
    return loss, tape.gradient(loss, l)

  if mode != "eager":
    step = tf.function(step, jit_compile=(mode == "jit"))
  loss, grad = step()
  np.testing.assert_allclose(loss.numpy(), 0.36, rtol=1e-6)
  np.testing.assert_allclose(grad.numpy(), 7.2, rtol=1e-6)
  # The model's own variable is untouched.
  np.testing.assert_array_equal(model.get_weights()[0], before)


def test_second_order_through_functional_call():
  """L = (6 l)^3 -> dL/dl = 648 l^2, d2L/dl2 = 1296 l; at l = 0.1: 6.48 and 129.6."""
  model = _dense_1x1()
  l = tf.Variable(0.1, dtype=tf.float32)
  with tf.GradientTape() as outer:
    with tf.GradientTape() as inner:
      out = functional.functional_call(model, {"d/kernel": tf.reshape(2.0 * l, (1, 1))},
                                       tf.constant([[3.0]]))
      loss = tf.reduce_sum(out ** 3)
    g = inner.gradient(loss, l)
  gg = outer.gradient(g, l)
  np.testing.assert_allclose(g.numpy(), 6.48, rtol=1e-5)
  np.testing.assert_allclose(gg.numpy(), 129.6, rtol=1e-5)


def _nested():
  inner = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="d1")], name="backbone")
  inp = keras.Input((3,))
  out = keras.layers.Dense(2, name="head")(inner(inp))
  return keras.Model(inp, out, name="outer")


def test_paths_of_nested_model_and_partial_weights():
  model = _nested()
  paths = list(functional.variable_paths(model))
  assert paths == ["backbone/d1/kernel", "backbone/d1/bias", "head/kernel", "head/bias"]
  x = tf.random.stateless_normal((5, 3), seed=[1, 2])
  np.testing.assert_allclose(functional.functional_call(model, {}, x), model(x), rtol=1e-6)
  new_head = tf.ones((4, 2))
  with tf.GradientTape() as tape:
    tape.watch(new_head)
    y = functional.functional_call(model, {"head/kernel": new_head}, x)
    loss = tf.reduce_sum(y)
  grads = tape.gradient(loss, [new_head] + model.trainable_variables)
  # Expected: head output = inner(x) @ ones + bias.
  hidden = model.get_layer("backbone")(x)
  np.testing.assert_allclose(y, hidden @ np.ones((4, 2)) + model.get_layer("head").bias, rtol=1e-5)
  # The given tensor gets dL/dW = sum_b hidden[b]; the replaced variable gets nothing;
  # variables not given get their gradients.
  np.testing.assert_allclose(grads[0], np.tile(np.sum(hidden, 0)[:, None], (1, 2)), rtol=1e-5)
  assert grads[1 + 2] is None
  assert grads[1] is not None and grads[1 + 3] is not None


def test_same_results_eager_and_function():
  model = _nested()
  x = tf.random.stateless_normal((5, 3), seed=[3, 4])
  w = {"backbone/d1/kernel": tf.random.stateless_normal((3, 4), seed=[5, 6])}
  eager = functional.functional_call(model, w, x)
  graph = tf.function(lambda w, x: functional.functional_call(model, w, x))(w, x)
  np.testing.assert_allclose(eager, graph, rtol=1e-6)


def test_batchnorm_state_returned_not_written():
  bn = keras.Sequential([keras.Input((1,)), keras.layers.BatchNormalization(name="bn")],
                        name="b")
  x = tf.constant([[2.0], [2.0]])
  out, state = functional.functional_call(bn, {}, x, training=True, return_state=True)
  np.testing.assert_allclose(out, [[0.0], [0.0]], atol=1e-6)
  np.testing.assert_allclose(state["bn/moving_mean"], [0.02], rtol=1e-6)
  np.testing.assert_allclose(state["bn/moving_variance"], [0.99], rtol=1e-6)
  np.testing.assert_array_equal(bn.get_layer("bn").moving_mean.numpy(), [0.0])
  out, state = functional.functional_call(bn, {}, x, training=False, return_state=True)
  np.testing.assert_allclose(out, [[2.0 / np.sqrt(1.001)]] * 2, rtol=1e-6)
  np.testing.assert_allclose(state["bn/moving_mean"], [0.0])
  functional.assign_state(bn, {"bn/moving_mean": tf.constant([0.5])})
  np.testing.assert_array_equal(bn.get_layer("bn").moving_mean.numpy(), [0.5])


def test_errors_name_the_problem():
  model = _dense_1x1()
  x = tf.constant([[1.0]])
  with pytest.raises(ValueError, match=r"Unknown weight path.*'d/kernl'.*d/kernel"):
    functional.functional_call(model, {"d/kernl": tf.ones((1, 1))}, x)
  with pytest.raises(ValueError, match=r"weights\['d/kernel'\] has shape \(2, 1\); the variable's shape is \(1, 1\)"):
    functional.functional_call(model, {"d/kernel": tf.ones((2, 1))}, x)
  with pytest.raises(TypeError, match=r"weights\['d/kernel'\]: expected dtype float32, given float64"):
    functional.functional_call(model, {"d/kernel": tf.ones((1, 1), tf.float64)}, x)
  unbuilt = keras.Sequential([keras.layers.Dense(1)])
  with pytest.raises(ValueError, match="not built"):
    functional.functional_call(unbuilt, {}, x)
  # A list where one tensor belongs, and a list where the dict belongs: both name the
  # argument (and the path), never a TensorFlow internal error.
  var_a, var_b = tf.Variable([[1.0]]), tf.Variable([[2.0]])
  with pytest.raises(TypeError, match=r"weights\['d/kernel'\] is a list of 2 tensors"):
    functional.functional_call(model, {"d/kernel": [var_a, var_b]}, x)
  with pytest.raises(TypeError, match=r"weights= must be a dict \{variable path: tensor\}.*got a list"):
    functional.functional_call(model, [var_a], x)
  with pytest.raises(TypeError, match=r"state= must be a dict"):
    functional.functional_call(model, None, x, state=[var_a])
  with pytest.raises(TypeError, match=r"weights\['d/kernel'\] cannot be converted to a tensor"):
    functional.functional_call(model, {"d/kernel": object()}, x)
  with pytest.raises(TypeError, match=r"weights\['d/kernel'\]: expected dtype float32, given string"):
    functional.functional_call(model, {"d/kernel": "two"}, x)
  with pytest.raises(ValueError, match=r"state= is for non-trainable.*\['d/kernel'\].*weights="):
    functional.functional_call(model, None, x, state={"d/kernel": tf.ones((1, 1))})
  from hypernet.hypernetworks import batched  # pylint: disable=g-import-not-at-top
  with pytest.raises(TypeError, match=r"batched_functional_call: weights\['d/kernel'\] is a list of 2"):
    batched.batched_functional_call(model, {"d/kernel": [var_a, var_b]}, x[None])
  with pytest.raises(TypeError, match=r"batched_functional_call: weights= must be a dict"):
    batched.batched_functional_call(model, [var_a], x[None])
  for fn in (lambda: functional.functional_call(model, {"d/kernel": [var_a, var_b]}, x),
             lambda: functional.functional_call(model, [var_a], x)):
    with pytest.raises(TypeError, match="functional_call"):
      tf.function(fn)()


def test_select_paths_globs_regex_and_no_match():
  model = _nested()
  assert functional.select_paths(model, "*/kernel") == ["backbone/d1/kernel", "head/kernel"]
  assert functional.select_paths(model, "re:head/.*") == ["head/kernel", "head/bias"]
  assert functional.select_paths(model, "*", exclude="backbone/*") == ["head/kernel", "head/bias"]
  with pytest.raises(ValueError, match=r"Pattern 'conv\*' matches no"):
    functional.select_paths(model, "conv*")
  spec = functional.weight_spec(model, "head/*")
  assert spec["head/kernel"].shape == (4, 2) and functional.num_elements(spec) == 10
