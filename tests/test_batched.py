"""Tests for a batch of weight sets in one forward pass (hypernet.hypernetworks.batched):
equality with a Python loop over the weight sets, gradients, BatchNorm state, errors."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.hypernetworks import batched
from hypernet.hypernetworks.batched import batched_functional_call

S = 3


def conv_model():
  return keras.Sequential([
      keras.Input((12, 12, 3)),
      keras.layers.Conv2D(8, 3, strides=2, padding="same", name="conv1"),
      keras.layers.BatchNormalization(name="bn1"),
      keras.layers.ReLU(),
      keras.layers.Conv2D(8, 3, dilation_rate=2, padding="valid", name="conv2"),
      keras.layers.DepthwiseConv2D(3, padding="same", name="dw"),
      keras.layers.Conv2D(6, 1, name="pointwise"),
      keras.layers.MaxPooling2D(2),
      keras.layers.Flatten(),
      keras.layers.Dense(5, name="head"),
  ], name="convnet")


def conv1d_model():
  return keras.Sequential([
      keras.Input((10, 2)),
      keras.layers.Conv1D(4, 3, padding="same", name="c1"),
      keras.layers.Conv1D(4, 3, strides=2, name="c2"),
      keras.layers.GlobalAveragePooling1D(),
      keras.layers.Dense(2, name="head"),
  ], name="conv1d")


def random_weights(model, patterns="*", seed=0, num_sets=S):
  rng = np.random.default_rng(seed)
  spec = functional.weight_spec(model, patterns)
  values = functional.variable_paths(model)
  return {p: tf.constant(values[p].numpy()[None]
                         + 0.3 * rng.standard_normal((num_sets,) + tuple(s.shape)), s.dtype)
          for p, s in spec.items()}


def loop(model, weights, inputs, training=False, per_example=False, shared=False):
  outs, states = [], []
  for s in range(next(iter(weights.values())).shape[0]):
    x = inputs if shared else inputs[s]
    if per_example:
      x = x[None]
    y, st = functional.functional_call(model, {p: w[s] for p, w in weights.items()}, x,
                                       training=training, return_state=True)
    outs.append(y[0] if per_example else y)
    states.append(st)
  return tf.stack(outs), {p: tf.stack([st[p] for st in states]) for p in states[0]}


GROUPED_REFUSED = (r"conv='grouped': .* cannot differentiate grouped convolutions in "
                   r"float32 .*conv='auto' or 'im2col'.*TF_ENABLE_ONEDNN_OPTS=1")


def grouped_refused(conv, dtype=tf.float32):
  """Whether a forced ``conv="grouped"`` is refused here: where TensorFlow cannot
  differentiate grouped convolutions (CPUs on which oneDNN is off)."""
  return conv == "grouped" and not batched.grouped_conv_available(dtype)


def test_forced_grouped_conv_is_refused_in_one_line_where_it_cannot_be_differentiated(
    monkeypatch):
  """Without the refusal the call ran and the gradient failed deep in a graph
  ("filter_size does not have enough elements"); on every machine: the probe's answer
  is set to no."""
  model = conv_model()
  w = random_weights(model)
  x = tf.random.stateless_normal((S, 4, 12, 12, 3), [1, 2])
  monkeypatch.setattr(batched, "_PROBED", {"float32": False})
  with pytest.raises(ValueError, match=GROUPED_REFUSED):
    batched_functional_call(model, w, x, conv="grouped")
  # conv="auto" then batches by im2col, equal to the loop.
  np.testing.assert_allclose(batched_functional_call(model, w, x, conv="auto").numpy(),
                             loop(model, w, x)[0].numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("conv", ["grouped", "im2col"])
@pytest.mark.parametrize("training", [False, True])
def test_batched_equals_python_loop(conv, training):
  model = conv_model()
  w = random_weights(model)
  x = tf.random.stateless_normal((S, 4, 12, 12, 3), [1, 2])
  if grouped_refused(conv):
    with pytest.raises(ValueError, match=GROUPED_REFUSED):
      batched_functional_call(model, w, x, training=training, conv=conv)
    return
  y, state = batched_functional_call(model, w, x, training=training, return_state=True,
                                     conv=conv)
  y_ref, state_ref = loop(model, w, x, training=training)
  assert y.shape == (S, 4, 5)
  np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-5)
  for p in state_ref:
    assert state[p].shape == (S,) + tuple(state_ref[p].shape[1:])
    np.testing.assert_allclose(state[p].numpy(), state_ref[p].numpy(), rtol=1e-5, atol=1e-6)
  if training:  # Each set normalised with its own batch statistics.
    assert not np.allclose(state["bn1/moving_mean"][0], state["bn1/moving_mean"][1])


def test_shared_and_per_example_inputs_and_map_fn():
  model = conv_model()
  w = random_weights(model, "conv*/*,head/*")
  x = tf.random.stateless_normal((4, 12, 12, 3), [3, 4])
  y = batched_functional_call(model, w, x, shared_inputs=True)
  np.testing.assert_allclose(y.numpy(), loop(model, w, x, shared=True)[0].numpy(),
                             rtol=1e-5, atol=1e-5)
  xe = x[:S]  # one example per weight set (dynamic hypernetworks)
  ye = batched_functional_call(model, w, xe, per_example=True)
  assert ye.shape == (S, 5)
  np.testing.assert_allclose(ye.numpy(), loop(model, w, xe, per_example=True)[0].numpy(),
                             rtol=1e-5, atol=1e-5)
  xs = tf.stack([x] * S)
  ym = batched_functional_call(model, w, xs, parallel="map_fn")
  np.testing.assert_allclose(ym.numpy(), y.numpy(), rtol=1e-5, atol=1e-5)


def test_conv1d_and_tf_function():
  model = conv1d_model()
  w = random_weights(model)
  x = tf.random.stateless_normal((S, 5, 10, 2), [5, 6])
  fn = tf.function(lambda w, x: batched_functional_call(model, w, x, conv="grouped"))
  if grouped_refused("grouped"):
    with pytest.raises(ValueError, match=GROUPED_REFUSED):
      fn(w, x)
  else:
    np.testing.assert_allclose(fn(w, x).numpy(), loop(model, w, x)[0].numpy(),
                               rtol=1e-5, atol=1e-5)
  with pytest.raises(NotImplementedError, match="'c1' \\(Conv1D.*conv='im2col'"):
    batched_functional_call(model, w, x, conv="im2col")


def test_im2col_conv_equals_tf_convolution():
  rng = np.random.default_rng(0)
  for strides, padding, dilation, size in [((1, 1), "same", (1, 1), 9), ((2, 2), "same", (1, 1), 8),
                                           ((2, 1), "valid", (1, 1), 9), ((1, 1), "same", (2, 2), 7),
                                           ((3, 3), "same", (1, 1), 10)]:
    x = tf.constant(rng.standard_normal((2, size, size + 1, 3)), tf.float32)
    k = tf.constant(rng.standard_normal((3, 2, 3, 4)), tf.float32)
    ref = tf.nn.convolution(x, k, strides=strides, padding=padding.upper(),
                            dilations=dilation)
    got = batched.conv2d_im2col(x, k, strides, padding, dilation)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("conv", ["grouped", "im2col"])
def test_batched_gradients_equal_loop_gradients(conv):
  model = conv_model()
  w = random_weights(model, "conv*/*,dw/*,bn1/*,head/kernel")
  x = tf.random.stateless_normal((S, 4, 12, 12, 3), [7, 8])
  # Weights shared by every set (trained directly) get the sum over sets.
  paths = functional.variable_paths(model, trainable=True)
  direct = [v for p, v in paths.items() if p not in w]
  assert [p for p in paths if p not in w] == ["pointwise/kernel", "pointwise/bias", "head/bias"]

  def grads(fn):
    with tf.GradientTape() as tape:
      tape.watch(w)
      loss = tf.reduce_sum(tf.sin(fn()))
    return tape.gradient(loss, (w, direct))

  if grouped_refused(conv):
    with pytest.raises(ValueError, match=GROUPED_REFUSED):
      batched_functional_call(model, w, x, training=True, conv=conv)
    return
  gw, gd = grads(lambda: batched_functional_call(model, w, x, training=True, conv=conv))
  rw, rd = grads(lambda: loop(model, w, x, training=True)[0])
  for p in w:
    scale = max(float(tf.reduce_max(tf.abs(rw[p]))), 1.0)  # conv1/bias (before BN): ~0
    np.testing.assert_allclose(gw[p].numpy() / scale, rw[p].numpy() / scale, atol=1e-5)
  for a, b in zip(gd, rd):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_float64_batched_call_uses_differentiable_conv():
  """Grouped-conv gradients have no float64 CPU kernel; auto falls back to im2col."""
  model = keras.Sequential([keras.Input((5, 5, 2), dtype="float64"),
                            keras.layers.Conv2D(3, 3, name="c", dtype="float64"),
                            keras.layers.Flatten(dtype="float64")])
  w = {p: tf.cast(v, tf.float64) for p, v in random_weights(model).items()}
  x = tf.constant(np.random.default_rng(0).standard_normal((S, 2, 5, 5, 2)))
  with tf.GradientTape() as tape:
    tape.watch(w)
    y = batched_functional_call(model, w, x)
    loss = tf.reduce_sum(y ** 2)
  g = tape.gradient(loss, w)["c/kernel"]
  with tf.GradientTape() as tape:
    tape.watch(w)
    loss = tf.reduce_sum(loop(model, w, x)[0] ** 2)
  np.testing.assert_allclose(g.numpy(), tape.gradient(loss, w)["c/kernel"].numpy(), rtol=1e-10)


def test_mobilenet_v2_batched_equals_loop():
  from hypernet.tasks import targets  # pylint: disable=g-import-not-at-top
  model = targets.make_mobilenet_v2((32, 32, 3), 4, alpha=0.35)
  patterns = "Conv1/kernel,block_1_depthwise/kernel,block_1_project/kernel,head/*"
  w = random_weights(model, patterns, num_sets=2)
  x = tf.random.stateless_normal((2, 2, 32, 32, 3), [9, 9])
  y = batched_functional_call(model, w, x, training=False)
  np.testing.assert_allclose(y.numpy(), loop(model, w, x)[0].numpy(), rtol=1e-5, atol=1e-5)


def test_reduce_state():
  state = {"bn/moving_mean": tf.constant([[1.0, 2.0], [3.0, 4.0]]),
           "seed_generator_state": tf.constant([[5, 6], [5, 6]], tf.int64)}
  out = batched.reduce_state(state)
  np.testing.assert_allclose(out["bn/moving_mean"].numpy(), [2.0, 3.0])
  np.testing.assert_array_equal(out["seed_generator_state"].numpy(), [5, 6])


# ----------------------------------------------------------------------------------------
# Errors.
# ----------------------------------------------------------------------------------------

def test_weight_batch_of_wrong_size_is_named():
  model = conv_model()
  w = random_weights(model, "conv1/kernel,head/bias")
  w["head/bias"] = w["head/bias"][:2]
  x = tf.zeros((S, 1, 12, 12, 3))
  with pytest.raises(ValueError, match="'head/bias' has 2 along its leading axis but "
                                       "'conv1/kernel' has 3"):
    batched_functional_call(model, w, x)
  w = random_weights(model, "conv1/kernel")
  with pytest.raises(ValueError, match=r"inputs\[0\] has 2 entries .* there are 3 weight sets"):
    batched_functional_call(model, w, tf.zeros((2, 1, 12, 12, 3)))
  with pytest.raises(ValueError, match=r"'conv1/kernel' must have shape \[S, \*\(3, 3, 3, 8\)\]"):
    batched_functional_call(model, {"conv1/kernel": w["conv1/kernel"][0]}, x)
  with pytest.raises(ValueError, match="shared_inputs or per_example, not both"):
    batched_functional_call(model, w, x, shared_inputs=True, per_example=True)


def test_unsupported_batched_kernel_is_named():
  model = keras.Sequential([keras.Input((4, 4, 4, 1)), keras.layers.Conv3D(2, 2, name="c3")])
  w = random_weights(model, "c3/kernel")
  with pytest.raises(NotImplementedError, match="'c3' \\(Conv3D.*parallel='map_fn'"):
    batched_functional_call(model, w, tf.zeros((S, 1, 4, 4, 4, 1)))
  y = batched_functional_call(model, w, tf.zeros((S, 1, 4, 4, 4, 1)), parallel="map_fn")
  assert y.shape == (S, 1, 3, 3, 3, 2)


def test_context_restores_layers_and_registry():
  from tensorflow.python.ops.parallel_for import pfor as pfor_lib  # pylint: disable=g-import-not-at-top
  model = conv_model()
  before = pfor_lib._pfor_converter_registry["Conv2D"]  # pylint: disable=protected-access
  conv1 = model.get_layer("conv1")
  with batched.vectorizable_convs(model, conv="im2col"):
    assert "convolution_op" in vars(conv1)
  assert "convolution_op" not in vars(conv1)
  with batched.vectorizable_convs(model, conv="grouped"):
    assert pfor_lib._pfor_converter_registry["Conv2D"] is not before  # pylint: disable=protected-access
  assert pfor_lib._pfor_converter_registry["Conv2D"] is before  # pylint: disable=protected-access


def test_per_example_weights_beside_shared_attention_kernels_match_a_loop():
  """Per-example weights on a model whose attention kernels are shared (not batched): pfor
  turns each shared projection into a broadcasting BatchMatMulV2 [S, 1, T, d] x [d, n],
  which TensorFlow 2.21's oneDNN kernel corrupts memory on for these shapes (the process
  aborted); hypernet's converter computes it as one 2-D MatMul. Against a loop."""
  keras.utils.set_random_seed(0)
  inputs = keras.Input((5, 8))
  h = keras.layers.MultiHeadAttention(2, 4, name="mha")(inputs, inputs)
  model = keras.Model(inputs, keras.layers.Dense(1, name="head")(keras.layers.Flatten()(h)))
  x = tf.constant(np.random.default_rng(0).normal(size=(16, 5, 8)), tf.float32)
  head = tf.convert_to_tensor(functional.variable_paths(model)["head/kernel"])
  kernels = head[None] * tf.reshape(tf.range(1.0, 17.0), [16, 1, 1])   # one per example
  got = batched.batched_functional_call(model, {"head/kernel": kernels}, x, per_example=True)
  want = tf.concat([functional.functional_call(model, {"head/kernel": kernels[i]}, x[i:i + 1])
                    for i in range(16)], 0)
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
