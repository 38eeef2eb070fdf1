"""Tests for hypernet.core.ops: straight-through overrides, layer output overrides, quantisers."""
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional, ops

MODES = ["eager", "function", "jit"]


def run(fn, mode, *args):
  if mode == "eager":
    return fn(*args)
  return tf.function(fn, jit_compile=(mode == "jit"))(*args)


def bits(t):
  """The bit pattern of a float tensor, for bit-for-bit comparisons."""
  t = tf.convert_to_tensor(t)
  unsigned = {2: tf.uint16, 4: tf.uint32, 8: tf.uint64}[t.dtype.size]
  return tf.bitcast(t, unsigned).numpy()


def fake_quant_int8(x, scale):
  return tf.clip_by_value(tf.round(x / scale), -128.0, 127.0) * scale


# ----------------------------------------------------------------------------------------
# override_value
# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_naive_straight_through_is_not_exact_but_override_is(mode):
  def f(x):
    q = fake_quant_int8(x, 0.01)
    naive = x + tf.stop_gradient(q - x)
    return q, naive, ops.override_value(x, q), ops.int8(x, scale=0.01)

  q, naive, ours, int8 = run(f, mode, tf.constant(1000.0))
  assert q.numpy() == np.float32(1.27)
  assert naive.numpy() == np.float32(1.2700195)  # rounded twice: 1000 + (1.27 - 1000)
  assert naive.numpy() != q.numpy()
  assert bits(ours) == bits(q)
  assert bits(int8) == bits(q)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
@pytest.mark.parametrize("mode", MODES)
def test_forward_is_value_bit_for_bit_and_gradient_is_upstream(dtype, mode):
  rng = np.random.default_rng(0)
  x = tf.cast(rng.normal(size=(4, 5)) * 100, dtype)
  value = tf.cast(rng.normal(size=(4, 5)) * 1e-3, dtype)
  upstream = tf.cast(rng.normal(size=(4, 5)), dtype)

  def f(x, value):
    with tf.GradientTape(persistent=True) as tape:
      tape.watch([x, value])
      z = ops.override_value(x, value)
      loss = tf.reduce_sum(z * upstream)
    return z, tape.gradient(loss, x), tape.gradient(loss, value)

  z, gx, gv = run(f, mode, x, value)
  assert z.dtype == dtype
  np.testing.assert_array_equal(bits(z), bits(value))
  np.testing.assert_array_equal(bits(gx), bits(upstream))
  assert gv is None


@pytest.mark.parametrize("mode", MODES)
def test_second_order_through_override(mode):
  # z = override_value(x, 2) acts as 2 forward and as x backward. y = z**4:
  # dy/dx = 4 z^3 = 32, d2y/dx2 = 12 z^2 = 48.
  # w = x * z**2 with z = override_value(x, 3), x = 1.5 (x enters on two paths):
  # dw/dx = z^2 + 2 x z = 18, d2w/dx2 = 2z + 2z + 2x = 15.
  def f(x):
    with tf.GradientTape(persistent=True) as outer:
      outer.watch(x)
      with tf.GradientTape(persistent=True) as inner:
        inner.watch(x)
        y = ops.override_value(x, 2.0) ** 4
        w = x * ops.override_value(x, 3.0) ** 2
      dy = inner.gradient(y, x)
      dw = inner.gradient(w, x)
    return y, dy, outer.gradient(dy, x), w, dw, outer.gradient(dw, x)

  y, dy, d2y, w, dw, d2w = [t.numpy() for t in run(f, mode, tf.constant(1.5))]
  assert (y, dy, d2y) == (16.0, 32.0, 48.0)
  assert (w, dw, d2w) == (13.5, 18.0, 15.0)


def test_second_order_matches_float64_finite_differences():
  # y = sin(z) * x with z = override_value(x, q(x)), q the int8 fake quantiser. The
  # straight-through surrogate at x0 is S(x) = sin(q(x0) + x - x0) * x; compare the tape's
  # first and second derivatives with central differences of S.
  x0 = tf.constant(0.4137, tf.float64)
  with tf.GradientTape() as outer:
    outer.watch(x0)
    with tf.GradientTape() as inner:
      inner.watch(x0)
      y = tf.sin(ops.int8(x0, scale=0.05)) * x0
    dy = inner.gradient(y, x0)
  d2y = outer.gradient(dy, x0)
  q0 = fake_quant_int8(x0, tf.constant(0.05, tf.float64)).numpy()
  s = lambda x: np.sin(q0 + x - x0.numpy()) * x
  h = 1e-4
  xs = x0.numpy()
  np.testing.assert_allclose(dy.numpy(), (s(xs + h) - s(xs - h)) / (2 * h), rtol=1e-8)
  np.testing.assert_allclose(d2y.numpy(), (s(xs + h) - 2 * s(xs) + s(xs - h)) / h**2,
                             rtol=1e-6)
  assert q0 == 0.4  # round(8.274) * 0.05


def test_broadcast_value():
  x = tf.reshape(tf.range(6, dtype=tf.float32), (2, 3))
  with tf.GradientTape() as tape:
    tape.watch(x)
    z = ops.override_value(x, tf.constant([7.0, 8.0, 9.0]))
    loss = tf.reduce_sum(z * x)
  np.testing.assert_array_equal(z.numpy(), [[7, 8, 9], [7, 8, 9]])
  # d/dx sum(z * x) with z straight-through of x: z + x.
  np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), [[7, 9, 11], [10, 12, 14]])
  np.testing.assert_array_equal(ops.override_value(x, 5.0).numpy(), np.full((2, 3), 5.0))


def test_dynamic_shape_in_tf_function():
  @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
  def f(x):
    return ops.override_value(x, tf.constant([1.0, 2.0, 3.0]))

  np.testing.assert_array_equal(f(tf.zeros((4, 3))).numpy(), np.tile([1.0, 2.0, 3.0], (4, 1)))


@pytest.mark.parametrize("shape", [(4,), (2, 2), (5, 2, 3), (2, 3, 1)])
def test_shape_mismatch_names_both_shapes(shape):
  with pytest.raises(ValueError) as e:
    ops.override_value(tf.zeros((2, 3)), tf.zeros(shape))
  assert str(shape) in str(e.value) and "(2, 3)" in str(e.value)


def test_dtype_errors():
  with pytest.raises(TypeError, match="float64.*float32"):
    ops.override_value(tf.zeros(3), tf.zeros(3, tf.float64))
  with pytest.raises(TypeError, match="int32"):
    ops.override_value(tf.zeros(3, tf.int32), tf.zeros(3, tf.int32))


# ----------------------------------------------------------------------------------------
# Layer output overrides.
# ----------------------------------------------------------------------------------------

def _square_layer():
  return keras.layers.Lambda(lambda t: t ** 2, name="square")


def _dense_a():
  return keras.layers.Dense(1, use_bias=False, kernel_initializer="ones", name="a")


def sequential_square():
  return keras.Sequential([keras.Input((1,)), _dense_a(), _square_layer()], name="seq")


def functional_square():
  inputs = keras.Input((1,))
  return keras.Model(inputs, _square_layer()(_dense_a()(inputs)), name="fun")


class SubclassedSquare(keras.Model):

  def __init__(self):
    super().__init__(name="sub")
    self.a = _dense_a()

  def call(self, x, training=None):
    return self.a(x) ** 2


BUILDERS = {"sequential": sequential_square, "functional": functional_square,
            "subclassed": SubclassedSquare}


def _built(kind):
  model = BUILDERS[kind]()
  model(tf.ones((1, 1)))
  return model


def _snapshot(model):
  return [(layer, dict(vars(layer))) for layer in model._flatten_layers()] + [
      (v, v.numpy().copy()) for v in model.variables]


def _assert_unmodified(model, snapshot):
  for obj, state in snapshot:
    if isinstance(state, dict):
      assert dict(vars(obj)) == state, f"{obj.name} changed"
      assert "call" not in vars(obj)
    else:
      np.testing.assert_array_equal(obj.numpy(), state)


TWO = {"a": lambda a: 2.0 * tf.ones_like(a)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(BUILDERS))
def test_square_worked_example(kind, mode):
  # Layer "a" outputs a = 1 * 1 = 1; y = a^2. Overridden to a = 2: y = 4 and
  # dy/da = 2a = 4, passed straight through to the input x and the kernel k (a = k x).
  model = _built(kind)
  snapshot = _snapshot(model)

  def f(x, k):
    with tf.GradientTape(persistent=True) as tape:
      tape.watch([x, k])
      y = functional.functional_call(model, {"a/kernel": k}, x, overrides=TWO)
      y_plain = functional.functional_call(model, {"a/kernel": k}, x)
    return (y, tape.gradient(y, x), tape.gradient(y, k),
            y_plain, tape.gradient(y_plain, x))

  y, dx, dk, y_plain, dx_plain = [t.numpy().item() for t in
                                  run(f, mode, tf.ones((1, 1)), tf.ones((1, 1)))]
  assert (y, dx, dk) == (4.0, 4.0, 4.0)
  assert (y_plain, dx_plain) == (1.0, 2.0)
  _assert_unmodified(model, snapshot)
  assert model(tf.ones((1, 1))).numpy().item() == 1.0


def test_context_manager_with_plain_model_call():
  model = _built("functional")
  x = tf.ones((1, 1))
  with tf.GradientTape() as tape:
    tape.watch(x)
    with ops.override_layer_outputs(model, TWO):
      y = model(x)
  assert y.numpy().item() == 4.0 and tape.gradient(y, x).numpy().item() == 4.0
  assert model(x).numpy().item() == 1.0


def test_model_unmodified_when_override_raises():
  model = _built("sequential")
  snapshot = _snapshot(model)

  def bad(a):
    raise RuntimeError("boom")

  with pytest.raises(RuntimeError, match="boom"):
    functional.functional_call(model, None, tf.ones((1, 1)), overrides={"a": bad})
  with pytest.raises(ValueError, match=r"\(1, 1\).*\(1, 1\)|shape"):
    functional.functional_call(model, None, tf.ones((1, 1)),
                               overrides={"a": lambda a: tf.ones((3, 1))})
  _assert_unmodified(model, snapshot)
  assert model(tf.ones((1, 1))).numpy().item() == 1.0


def test_unknown_layer_lists_names():
  model = _built("functional")
  with pytest.raises(ValueError, match=r"'nope'.*\['a', 'square'\]"):
    functional.functional_call(model, None, tf.ones((1, 1)), overrides={"nope": lambda a: a})
  with pytest.raises(TypeError, match="callable"):
    functional.functional_call(model, None, tf.ones((1, 1)), overrides={"a": 2.0})


def test_nested_model_by_path_and_by_name():
  inner = keras.Sequential([keras.Input((1,)), _dense_a()], name="backbone")
  outer = keras.Sequential([keras.Input((1,)), inner, _square_layer()], name="outer")
  x = tf.ones((1, 1))
  assert "backbone/a" in ops.layer_paths(outer)
  for key in ("backbone/a", "a"):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = functional.functional_call(outer, None, x, overrides={key: TWO["a"]})
    assert y.numpy().item() == 4.0 and tape.gradient(y, x).numpy().item() == 4.0
  assert outer(x).numpy().item() == 1.0


def test_overrides_are_per_thread_and_restored():
  # Two threads override the same layer with different values at the same time (held
  # inside their contexts by a barrier); each sees its own value, and the model is
  # restored once both have left.
  model = _built("functional")
  snapshot = _snapshot(model)
  barrier = threading.Barrier(2)
  results = {}

  def worker(v):
    with ops.override_layer_outputs(model, {"a": lambda a: v * tf.ones_like(a)}):
      barrier.wait()
      results[v] = model(tf.ones((1, 1))).numpy().item()
      barrier.wait()

  threads = [threading.Thread(target=worker, args=(v,)) for v in (2.0, 3.0)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert results == {2.0: 4.0, 3.0: 9.0}
  _assert_unmodified(model, snapshot)


def test_functional_call_overrides_inside_mirrored_strategy():
  # conftest splits the CPU into /cpu:0 and /cpu:1; each replica runs in its own thread,
  # and functional_call enters the (thread-local) override there.
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  with strategy.scope():
    model = _built("functional")

  @tf.function
  def step():
    def replica():
      x = tf.ones((1, 1))
      with tf.GradientTape() as tape:
        tape.watch(x)
        y = functional.functional_call(model, None, x, overrides=TWO)
      return y, tape.gradient(y, x)
    return strategy.run(replica)

  y, dx = step()
  for t in strategy.experimental_local_results(y) + strategy.experimental_local_results(dx):
    assert t.numpy().item() == 4.0
  assert model(tf.ones((1, 1))).numpy().item() == 1.0
  assert "call" not in vars(model.get_layer("a"))


def _cnn(kind):
  conv = keras.layers.Conv2D(32, 3, name="conv")  # linear: its output is a pre-activation
  head = keras.layers.Dense(5, name="head")
  if kind == "functional":
    image = keras.Input((8, 8, 3))
    pre = conv(image)
    h = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU()(pre))
    model = keras.Model(image, [pre, head(h)], name="cnn")
  else:
    class CNN(keras.Model):

      def __init__(self):
        super().__init__(name="cnn")
        self.conv, self.head = conv, head

      def call(self, image, training=None):
        pre = self.conv(image)
        return pre, self.head(tf.reduce_mean(tf.nn.relu(pre), axis=(1, 2)))

    model = CNN()
  keras.utils.set_random_seed(1)
  model(tf.zeros((1, 8, 8, 3)))
  return model


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("kind", ["functional", "subclassed"])
def test_cnn_channel_override_keeps_gradient_changes_downstream(kind, mode):
  model = _cnn(kind)
  snapshot = _snapshot(model)
  image = tf.random.stateless_normal((2, 8, 8, 3), seed=(3, 4))
  ablate = {"conv": lambda h: ops.set_slice(h, 24, 3.0)}

  def f(image):
    out = {}
    for name, overrides in (("plain", None), ("override", ablate)):
      with tf.GradientTape() as tape:
        tape.watch(image)
        pre, logits = functional.functional_call(model, None, image, overrides=overrides)
        channel_mean = tf.reduce_mean(pre[..., 24])
      out[name] = (pre, logits, channel_mean, tape.gradient(channel_mean, image))
    return out

  out = run(f, mode, image)
  pre0, logits0, mean0, grad0 = [t.numpy() for t in out["plain"]]
  pre1, logits1, mean1, grad1 = [t.numpy() for t in out["override"]]
  # The override sets channel 24 to 3 and leaves the other channels bit for bit.
  np.testing.assert_array_equal(pre1[..., 24], np.full((2, 6, 6), 3.0, np.float32))
  np.testing.assert_array_equal(np.delete(pre1, 24, -1), np.delete(pre0, 24, -1))
  assert mean1 == 3.0 and abs(mean0 - 3.0) > 0.1
  # Same gradient with and without the override (straight through), and it is the right
  # one: the channel mean is affine in the image, so mean = <grad, image> + bias[24].
  np.testing.assert_array_equal(grad1, grad0)
  bias = model.get_layer("conv").bias.numpy() if kind == "functional" else model.conv.bias
  np.testing.assert_allclose(np.sum(grad0 * image.numpy()) + np.asarray(bias)[24], mean0,
                             rtol=1e-5, atol=1e-6)
  assert np.abs(grad0).max() > 0
  # Downstream sees the new value: logits = head(mean over positions of relu(pre1)).
  head = model.get_layer("head") if kind == "functional" else model.head
  expected = np.maximum(pre1, 0).mean(axis=(1, 2)) @ head.kernel.numpy() + head.bias.numpy()
  np.testing.assert_allclose(logits1, expected, rtol=1e-5, atol=1e-6)
  assert np.abs(logits1 - logits0).max() > 1e-3
  _assert_unmodified(model, snapshot)


def test_cnn_per_channel_mean_override():
  # Override the per-channel mean of the conv output to 0: downstream sees zero-mean
  # channels; the gradient of any loss on the output reaches the kernel unchanged.
  model = _cnn("functional")
  image = tf.random.stateless_normal((2, 8, 8, 3), seed=(5, 6))
  upstream = tf.random.stateless_normal((2, 6, 6, 32), seed=(7, 8))
  grads = []
  for overrides in (None, {"conv": lambda h: ops.set_mean(h, 0.0, axis=(0, 1, 2))}):
    with tf.GradientTape() as tape:
      pre, _ = functional.functional_call(model, None, image, overrides=overrides)
      loss = tf.reduce_sum(pre * upstream)
    grads.append(tape.gradient(loss, model.get_layer("conv").kernel))
  np.testing.assert_allclose(tf.reduce_mean(pre, axis=(0, 1, 2)).numpy(), np.zeros(32),
                             atol=1e-6)
  np.testing.assert_array_equal(grads[1].numpy(), grads[0].numpy())


# ----------------------------------------------------------------------------------------
# Quantisers.
# ----------------------------------------------------------------------------------------

def test_binary_values():
  w = tf.constant([0.5, -1.0, 0.0, 1.5])  # mean|w| = 0.75
  np.testing.assert_array_equal(ops.binary(w).numpy(), [0.75, -0.75, 0.75, 0.75])
  np.testing.assert_array_equal(ops.binary(w, scaled=False).numpy(), [1, -1, 1, 1])
  k = tf.constant([[1.0, -4.0], [-3.0, 2.0]])  # per output unit (axis=0): 2 and 3
  np.testing.assert_array_equal(ops.binary(k, axis=0).numpy(), [[2, -3], [-2, 3]])


def test_ternary_values():
  # mean|w| = 3.375 / 5 = 0.675, Delta = 0.4725: keep -1, 0.5, 1.5; alpha = 3 / 3 = 1.
  w = tf.constant([0.125, -1.0, 0.5, -0.25, 1.5])
  np.testing.assert_array_equal(ops.ternary(w).numpy(), [0, -1, 1, 0, 1])
  # Per column: [4, -0.5] -> mean 2.25, Delta 1.575, alpha 4; [0.25, -2] -> alpha 2.
  k = tf.constant([[4.0, 0.25], [-0.5, -2.0]])
  np.testing.assert_array_equal(ops.ternary(k, axis=0).numpy(), [[4, 0], [0, -2]])
  np.testing.assert_array_equal(ops.ternary(tf.zeros(3)).numpy(), [0, 0, 0])


def test_int8_values():
  w = tf.constant([0.5, -1.27, 0.004, 0.006, 1000.0, -1000.0, 0.015])
  q = ops.int8(w, scale=0.01)
  codes = np.round(q.numpy() / np.float32(0.01))
  np.testing.assert_array_equal(codes, [50, -127, 0, 1, 127, -128, 2])  # 1.5 -> 2 (even)
  np.testing.assert_array_equal(bits(q), bits(tf.constant(codes, tf.float32) * 0.01))
  # Per-tensor symmetric: scale = max|w| / 127 = 0.01.
  w = tf.constant([0.254, -1.27, 0.6])
  q = ops.int8(w)
  scale = np.float32(1.27) / np.float32(127)
  np.testing.assert_array_equal(bits(q), bits(tf.constant([25, -127, 60], tf.float32) * scale))
  np.testing.assert_array_equal(ops.int8(tf.zeros(2)).numpy(), [0, 0])
  with pytest.raises(ValueError, match="positive"):
    ops.int8(w, scale=0.0)


@pytest.mark.parametrize("kind", ["binary", "ternary", "int8"])
@pytest.mark.parametrize("mode", MODES)
def test_quantiser_gradient_is_upstream(kind, mode):
  w = tf.random.stateless_normal((3, 4), seed=(1, 2))
  upstream = tf.random.stateless_normal((3, 4), seed=(3, 4))

  def f(w):
    with tf.GradientTape() as tape:
      tape.watch(w)
      q = ops.QUANTIZERS[kind](w)
      loss = tf.reduce_sum(q * upstream)
    return q, tape.gradient(loss, w)

  q, g = run(f, mode, w)
  np.testing.assert_array_equal(bits(g), bits(upstream))
  eager = ops.QUANTIZERS[kind](w)
  if mode == "jit":  # XLA may sum the scale's reduction in another order
    np.testing.assert_allclose(q.numpy(), eager.numpy(), rtol=1e-6)
  else:
    np.testing.assert_array_equal(bits(q), bits(eager))


def test_quantize_weights_registry():
  weights = {"dense/kernel": tf.constant([[0.5, -1.0], [0.0, 1.5]]),
             "dense/bias": tf.constant([0.3, -0.1])}
  none = ops.quantize_weights(weights, "none")
  assert list(none) == list(weights)
  for p in weights:
    np.testing.assert_array_equal(none[p].numpy(), weights[p].numpy())
  kernels = ops.quantize_weights(weights, "binary", patterns="*/kernel")
  np.testing.assert_array_equal(kernels["dense/kernel"].numpy(), [[0.75, -0.75], [0.75, 0.75]])
  assert kernels["dense/bias"] is weights["dense/bias"]
  with pytest.raises(ValueError, match=r"'int4'.*\['binary', 'int8', 'none', 'ternary'\]"):
    ops.quantize_weights(weights, "int4")
  with pytest.raises(ValueError, match="conv"):
    ops.quantize_weights(weights, "int8", patterns="conv*/kernel")
  with pytest.raises(TypeError, match="seed"):
    ops.quantize_weights({"seed": tf.constant([1, 2])}, "int8")


@pytest.mark.parametrize("kind", ["none", "binary", "ternary", "int8"])
def test_generator_gradient_through_quantised_weights_matches_finite_differences(kind):
  # A toy generator (one tf.Variable theta) produces a Dense layer's kernel and bias;
  # they are quantised and run through functional_call. The tape's gradient with respect
  # to theta must equal central differences of the straight-through surrogate
  # S(theta) = L(q(w(theta0)) + w(theta) - w(theta0)), all in float64.
  rng = np.random.default_rng(7)
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, name="dense",
                                                                  dtype="float64")])
  a = tf.constant(rng.normal(size=(9, 5)), tf.float64)
  theta = tf.Variable(rng.normal(size=5), dtype=tf.float64)
  x = tf.constant(rng.normal(size=(4, 2)), tf.float64)
  u = tf.constant(rng.normal(size=(4, 3)), tf.float64)

  def generate(theta):
    w = tf.tanh(tf.linalg.matvec(a, theta)) * 2.0
    return {"dense/kernel": tf.reshape(w[:6], (2, 3)), "dense/bias": w[6:]}

  def loss(weights):
    return tf.reduce_sum(u * tf.tanh(functional.functional_call(model, weights, x)) ** 2)

  with tf.GradientTape() as tape:
    quantised = ops.quantize_weights(generate(theta), kind)
    value = loss(quantised)
  grad = tape.gradient(value, theta).numpy()

  w0 = generate(theta)
  q0 = ops.quantize_weights(w0, kind)
  np.testing.assert_allclose(value.numpy(), loss(q0).numpy(), rtol=0, atol=0)

  def surrogate(t):
    w = generate(tf.constant(t))
    return loss({p: q0[p] + w[p] - w0[p] for p in w}).numpy()

  h = 1e-6
  fd = np.array([(surrogate(theta.numpy() + h * e) - surrogate(theta.numpy() - h * e)) / (2 * h)
                 for e in np.eye(5)])
  np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)
  assert np.abs(grad).max() > 1e-3
  if kind != "none":  # quantisation really changed the weights
    assert np.abs(q0["dense/kernel"].numpy() - w0["dense/kernel"].numpy()).max() > 1e-3


def test_python_number_hyperparameters_are_exact_in_float64():
  assert float(ops.to_dtype(0.1, tf.float64)) == 0.1
  assert float(tf.cast(0.1, tf.float64)) != 0.1          # what to_dtype avoids
  assert ops.to_dtype(tf.constant(0.5), tf.float64).dtype == tf.float64
  # ternary's threshold 0.7 * mean|w| = 0.7 exactly in float64: 0.6999999999 is below it
  # (a float32 0.7 = 0.69999998807907 would keep it).
  w = tf.constant([0.6999999999, 1.3000000001], tf.float64)
  np.testing.assert_array_equal(ops.ternary(w).numpy(), [0.0, 1.3000000001])
