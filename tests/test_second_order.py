"""Exact first and second derivatives through every Keras layer class a target may hold.

Each layer of Keras' zoo sits in a small float64 target (with a nonlinearity before it:
after an affine layer a missing second-order term of a normalisation cancels and would
hide). Through :func:`hypernet.core.functional.functional_call`, for a scalar ``L(w)`` of all
trainable weights ``w`` and a random direction ``v``:

* first order: ``g.v`` against central finite differences of ``L``;
* second order: the Hessian-vector product ``Hv`` from nested tapes against central
  finite differences of ``g``;

eagerly and inside ``tf.function``. docs/layers.md is the table of what this tests.
"""
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.numerics import second_order
from hypernet.meta import inner_loop

import supported

F64 = "float64"
L = keras.layers


def _seq(input_shape, layers, input_dtype=F64):
  inputs = keras.Input(input_shape, dtype=input_dtype)
  h = inputs
  for layer in layers:
    h = layer(h)
  h = L.Flatten(dtype=F64)(h)
  h = L.Dense(1, dtype=F64, name="out")(h)
  return keras.Model(inputs, h)


def _tanh():
  return L.Activation("tanh", dtype=F64)


def _pre(units_shape):
  """Dense + tanh before the layer under test (a nonlinearity first, see module doc)."""
  return [L.Dense(units_shape, dtype=F64, name="pre"), _tanh()]


def _image_case(make_layer, shape=(5, 5, 3), channels=3):
  return lambda: (_seq(shape, _pre(channels) + [make_layer(), _tanh()]),
                  np.random.default_rng(0).normal(size=(2,) + shape))


def _seq_case(make_layer, shape=(4, 3)):
  return lambda: (_seq(shape, _pre(shape[-1]) + [make_layer(), _tanh()]),
                  np.random.default_rng(0).normal(size=(3,) + shape))


def _vector_case(make_layer, shape=(6,)):
  return lambda: (_seq(shape, _pre(shape[-1]) + [make_layer(), _tanh()]),
                  np.random.default_rng(0).normal(size=(4,) + shape))


def _embedding_case():
  def build():
    inputs = keras.Input((4,), dtype="int32")
    h = L.Embedding(7, 3, dtype=F64, name="emb")(inputs)
    h = L.Dense(3, dtype=F64)(_tanh()(h))
    h = L.Dense(1, dtype=F64, name="out")(L.Flatten(dtype=F64)(_tanh()(h)))
    return keras.Model(inputs, h), np.array([[0, 3, 6, 3], [1, 2, 5, 0]], np.int32)
  return build


def _attention_case():
  def build():
    inputs = keras.Input((4, 6), dtype=F64)
    h = _tanh()(L.Dense(6, dtype=F64)(inputs))
    h = L.MultiHeadAttention(2, 3, dtype=F64, name="mha")(h, h)
    h = L.Dense(1, dtype=F64, name="out")(L.Flatten(dtype=F64)(_tanh()(h)))
    return keras.Model(inputs, h), np.random.default_rng(0).normal(size=(2, 4, 6))
  return build


# Each case builds its model (the layer under test included) afresh on every call, after
# the test seeds Keras: a case's weights do not depend on which test built it first.
CASES = {
    "Dense": _vector_case(lambda: L.Dense(5, dtype=F64)),
    "EinsumDense": _vector_case(lambda: L.EinsumDense("ab,bc->ac", output_shape=5,
                                                      bias_axes="c", dtype=F64)),
    "Conv1D": _seq_case(lambda: L.Conv1D(4, 2, dtype=F64)),
    "Conv2D": _image_case(lambda: L.Conv2D(4, 3, padding="same", dtype=F64)),
    "Conv2D_strided": _image_case(lambda: L.Conv2D(4, 3, strides=2, dtype=F64)),
    "Conv3D": lambda: (_seq((3, 3, 3, 2), _pre(2) + [L.Conv3D(2, 2, dtype=F64), _tanh()]),
                       np.random.default_rng(0).normal(size=(2, 3, 3, 3, 2))),
    "Conv1DTranspose": _seq_case(lambda: L.Conv1DTranspose(2, 2, strides=2, dtype=F64)),
    "Conv2DTranspose": _image_case(lambda: L.Conv2DTranspose(2, 3, strides=2, dtype=F64)),
    "DepthwiseConv1D": _seq_case(lambda: L.DepthwiseConv1D(2, dtype=F64)),
    "DepthwiseConv2D": _image_case(lambda: L.DepthwiseConv2D(3, depth_multiplier=2, dtype=F64)),
    "SeparableConv1D": _seq_case(lambda: L.SeparableConv1D(2, 2, dtype=F64)),
    "SeparableConv2D": _image_case(lambda: L.SeparableConv2D(2, 3, dtype=F64)),
    "Embedding": _embedding_case(),
    "BatchNormalization": _image_case(lambda: L.BatchNormalization(dtype=F64)),
    "BatchNormalization_inference": _image_case(lambda: L.BatchNormalization(dtype=F64)),
    "LayerNormalization": _vector_case(lambda: L.LayerNormalization(dtype=F64)),
    "LayerNormalization_rms": _vector_case(lambda: L.LayerNormalization(rms_scaling=True,
                                                                         dtype=F64)),
    "GroupNormalization": _image_case(lambda: L.GroupNormalization(groups=3, dtype=F64)),
    "RMSNormalization": _vector_case(lambda: L.RMSNormalization(dtype=F64)),
    "UnitNormalization": _vector_case(lambda: L.UnitNormalization(dtype=F64)),
    "MaxPooling2D": _image_case(lambda: L.MaxPooling2D(2, dtype=F64)),
    "AveragePooling2D": _image_case(lambda: L.AveragePooling2D(2, dtype=F64)),
    "GlobalAveragePooling2D": _image_case(lambda: L.GlobalAveragePooling2D(dtype=F64)),
    "GlobalMaxPooling1D": _seq_case(lambda: L.GlobalMaxPooling1D(dtype=F64)),
    "Dropout": _vector_case(lambda: L.Dropout(0.5, seed=3, dtype=F64)),
    "PReLU": _vector_case(lambda: L.PReLU(
        alpha_initializer=keras.initializers.Constant(0.3), dtype=F64)),
    "ELU_Softmax": _vector_case(lambda: keras.Sequential([L.ELU(dtype=F64),
                                                          L.Softmax(dtype=F64)])),
    "SimpleRNN": _seq_case(lambda: L.SimpleRNN(3, return_sequences=True, dtype=F64)),
    "LSTM": _seq_case(lambda: L.LSTM(3, dtype=F64)),
    "GRU": _seq_case(lambda: L.GRU(3, return_sequences=True, dtype=F64)),
    "Bidirectional_LSTM": _seq_case(lambda: L.Bidirectional(
        L.LSTM(2, return_sequences=True, dtype=F64), dtype=F64)),
    "MultiHeadAttention": _attention_case(),
    "Conv2D_dilated": _image_case(lambda: L.Conv2D(2, 2, dilation_rate=2, dtype=F64)),
    "ZeroPadding_Cropping_UpSamplingNearest": _image_case(lambda: keras.Sequential([
        L.ZeroPadding2D(1, dtype=F64), L.Cropping2D(1, dtype=F64),
        L.UpSampling2D(2, dtype=F64)])),
    "Reshape_Permute": _image_case(lambda: keras.Sequential([
        L.Reshape((25, 3), dtype=F64), L.Permute((2, 1), dtype=F64)])),
    "GaussianNoise_GaussianDropout": _vector_case(lambda: keras.Sequential([
        L.GaussianNoise(0.3, seed=1, dtype=F64), L.GaussianDropout(0.3, seed=2, dtype=F64)])),
    "BatchNormalization_axis1": _seq_case(lambda: L.BatchNormalization(axis=1, momentum=0.3,
                                                                       dtype=F64)),
    "ConvLSTM1D": lambda: (_seq((3, 4, 2), _pre(2) + [L.ConvLSTM1D(2, 2, dtype=F64), _tanh()]),
                           np.random.default_rng(0).normal(size=(2, 3, 4, 2))),
}
TRAINING = {"BatchNormalization": True, "Dropout": True, "GaussianNoise_GaussianDropout": True,
            "BatchNormalization_axis1": True}


def _derivatives(model, x, paths, training, compiled, with_first=False):
  """Returns fn(flat w) -> (L, g, Hv) for the fixed direction v, and v (also used by
  tests/test_edges.py). with_first: also the function that the finite differences call,
  first(flat w) -> (L, g): fn's when compiled, else one eager tape (the same L and g,
  without the Hv they would discard)."""
  shapes = [tuple(functional.variable_paths(model)[p].shape) for p in paths]
  sizes = [int(np.prod(s)) for s in shapes]
  n = sum(sizes)
  v = tf.constant(np.random.default_rng(1).normal(size=n))
  c = tf.constant(np.random.default_rng(2).normal(size=(x.shape[0], 1)))
  x = tf.constant(x)

  def loss_fn(flat):
    parts = tf.split(flat, sizes)
    weights = {p: tf.reshape(t, s) for p, t, s in zip(paths, parts, shapes)}
    return tf.reduce_sum(c * functional.functional_call(model, weights, x,
                                                        training=training))

  def fn(flat):
    with tf.GradientTape() as outer:
      outer.watch(flat)
      with tf.GradientTape() as inner:
        inner.watch(flat)
        loss = loss_fn(flat)
      g = inner.gradient(loss, flat)
      gv = tf.reduce_sum(g * v)
    hv = outer.gradient(gv, flat)
    return loss, g, hv

  def first(flat):
    with tf.GradientTape() as tape:
      tape.watch(flat)
      loss = loss_fn(flat)
    return loss, tape.gradient(loss, flat)

  if compiled:
    fn = tf.function(fn)
    first = lambda flat: fn(flat)[:2]
  return (fn, v, first) if with_first else (fn, v)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "function"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_first_and_second_order_match_finite_differences(name, compiled):
  keras.utils.set_random_seed(0)
  model, x = CASES[name]()
  training = TRAINING.get(name, False)
  paths = list(functional.variable_paths(model, trainable=True))
  w0 = tf.concat([tf.reshape(functional.variable_paths(model)[p], [-1]) for p in paths], 0)
  fn, v, first = _derivatives(model, x, paths, training, compiled, with_first=True)
  loss, g, hv = fn(w0)
  # Central differences at h and 2h, Richardson-extrapolated: error O(h^4) (~1e-11 here)
  # instead of O(h^2) (~1e-9, as large as the 1e-9 floor below when g.v happens to be
  # small: it failed at g.v = 5e-4 with a correct gradient).
  h = 1e-5
  central = {}
  for k in (1, 2):
    lp, gp = first(w0 + k * h * v)
    lm, gm = first(w0 - k * h * v)
    central[k] = ((lp - lm).numpy() / (2 * k * h), (gp - gm).numpy() / (2 * k * h))
  fd_first, fd_second = ((4 * central[1][i] - central[2][i]) / 3 for i in (0, 1))
  gv = float(tf.reduce_sum(g * v))
  assert abs(gv - fd_first) <= 1e-6 * max(abs(gv), 1e-3), (name, gv, fd_first)
  err = np.linalg.norm(hv.numpy() - fd_second)
  assert err <= 1e-6 * max(np.linalg.norm(fd_second), 1e-3), (name, err,
                                                               np.linalg.norm(fd_second))


def test_layer_normalization_exact_values_and_keras_as_shipped():
  """The issue's case: LayerNormalization(epsilon=1e-3) on [a, 0.5, -1], f = 0.3 y0 -
  1.2 y1 + 0.7 y2 at a = 0.2: f' = 1.0263683, f'' = 0.4278768 (Keras alone: 0.9404)."""
  inputs = keras.Input((3,), dtype=F64)
  model = keras.Model(inputs, L.LayerNormalization(epsilon=1e-3, dtype=F64)(inputs))
  c = tf.constant([0.3, -1.2, 0.7], tf.float64)
  a = tf.Variable(0.2, dtype=tf.float64)

  def derivatives(call):
    with tf.GradientTape() as t2:
      with tf.GradientTape() as t1:
        x = tf.stack([a, tf.constant(0.5, tf.float64), tf.constant(-1.0, tf.float64)])[None]
        f = tf.reduce_sum(call(x)[0] * c)
      g = t1.gradient(f, a)
    return float(g), float(t2.gradient(g, a))

  for call in (lambda x: functional.functional_call(model, None, x),
               tf.function(lambda x: functional.functional_call(model, None, x))):
    g, h = derivatives(call)
    assert g == pytest.approx(1.0263683, abs=1e-7)
    assert h == pytest.approx(0.4278768, abs=1e-7)
  # Outside a functional call Keras is left as shipped: f'' equals that of a LayerNorm
  # written with TensorFlow's own tf.nn.moments (0.9404 where TensorFlow <= 2.21 stops the
  # gradient through the mean inside the variance; exact, 0.4278768, where it does not).
  def shipped(x):
    mean, var = tf.nn.moments(x, [-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-3)

  assert derivatives(model)[1] == pytest.approx(derivatives(shipped)[1], abs=1e-7)
  with second_order.exact_moments_scope():
    assert derivatives(model)[1] == pytest.approx(0.4278768, abs=1e-7)


def _mse(y, out):
  return tf.reduce_mean(tf.square(out - y))


def test_maml_meta_gradient_through_layer_normalization_matches_finite_differences():
  """Input(4) -> Dense(6) -> tanh -> LayerNormalization -> tanh -> Dense(1), MSE, inner
  lr 0.5, one step: the second-order meta-gradient equals central differences to 1e-6."""
  keras.utils.set_random_seed(0)
  inputs = keras.Input((4,), dtype=F64)
  h = L.Activation("tanh", dtype=F64)(L.Dense(6, dtype=F64, name="d1")(inputs))
  h = L.Activation("tanh", dtype=F64)(L.LayerNormalization(dtype=F64, name="ln")(h))
  model = keras.Model(inputs, L.Dense(1, dtype=F64, name="d2")(h))
  rng = np.random.default_rng(0)
  sx, sy, qx, qy = (tf.constant(rng.normal(size=s)) for s in ((6, 4), (6, 1), (6, 4), (6, 1)))
  learner = inner_loop.MAML(model, _mse, inner_lr=0.5, inner_steps=1)
  paths = list(functional.variable_paths(model, trainable=True))
  variables = functional.variable_paths(model)

  def meta_loss(weights):
    fast, _ = learner.adapt(sx, sy, weights)
    return _mse(qy, functional.functional_call(model, fast, qx))

  w0 = {p: tf.convert_to_tensor(variables[p]) for p in paths}
  with tf.GradientTape() as tape:
    tape.watch(list(w0.values()))
    loss = meta_loss(w0)
  grads = tape.gradient(loss, w0)
  eps = 1e-5
  for p in paths:
    flat = w0[p].numpy().ravel()
    for i in range(0, flat.size, max(1, flat.size // 4)):
      bump = np.zeros_like(flat)
      bump[i] = eps
      plus = dict(w0, **{p: tf.constant((flat + bump).reshape(w0[p].shape))})
      minus = dict(w0, **{p: tf.constant((flat - bump).reshape(w0[p].shape))})
      fd = (float(meta_loss(plus)) - float(meta_loss(minus))) / (2 * eps)
      got = float(tf.reshape(grads[p], [-1])[i])
      assert got == pytest.approx(fd, rel=1e-6, abs=1e-9), (p, i, got, fd)


def test_layers_that_cannot_be_exact_are_refused_by_second_order_learners():
  inputs = keras.Input((3,))
  sn = keras.Model(inputs, L.SpectralNormalization(L.Dense(2), name="sn")(inputs))
  with pytest.raises(ValueError, match=r"'sn'.*power-iteration.*first_order=True"):
    inner_loop.MAML(sn, _mse)
  inner_loop.MAML(sn, _mse, first_order=True)        # first order has no such term
  plain = keras.Model(inputs, L.BatchNormalization(name="bn")(inputs))
  assert second_order.inexact_second_order_layers(plain) == []
  # Image resizing: TF registers the bilinear resize gradient as not differentiable (a
  # silent 0 second derivative); the other modes have no second derivative at all.
  images = keras.Input((4, 4, 1))
  for layer, name in ((L.UpSampling2D(2, interpolation="bilinear", name="up"), "up"),
                      (L.Resizing(8, 8, name="resize"), "resize")):
    with pytest.raises(ValueError, match=rf"'{name}'.*resize"):
      inner_loop.MAML(keras.Model(images, layer(images)), _mse)
  nearest = keras.Model(images, L.UpSampling2D(2, name="up_nearest")(images))
  assert second_order.inexact_second_order_layers(nearest) == []


@supported.requires_keras("3.14", "BatchNormalization(renorm=...)")
def test_batch_renormalisation_is_refused_by_second_order_learners():
  inputs = keras.Input((3,))
  renorm = keras.Model(inputs, L.BatchNormalization(renorm=True, name="rbn")(inputs))
  with pytest.raises(ValueError, match=r"'rbn'.*renormalisation"):
    inner_loop.MetaSGD(renorm, _mse)


def test_inner_tape_traced_and_outer_tape_outside_stays_exact():
  """A user's tf.function holding only the inner tape, differentiated by an eager outer
  tape: the outer tape is invisible in the trace, so the moments must stay exact there
  (LayerNormalization case of the issue: f'' = 0.4278768)."""
  inputs = keras.Input((3,), dtype=F64)
  model = keras.Model(inputs, L.LayerNormalization(epsilon=1e-3, dtype=F64)(inputs))
  c = tf.constant([0.3, -1.2, 0.7], tf.float64)

  @tf.function
  def first_derivative(a):
    with tf.GradientTape() as t1:
      t1.watch(a)
      x = tf.stack([a, tf.constant(0.5, tf.float64), tf.constant(-1.0, tf.float64)])[None]
      f = tf.reduce_sum(functional.functional_call(model, None, x)[0] * c)
    return t1.gradient(f, a)

  a = tf.constant(0.2, tf.float64)
  with tf.GradientTape() as t2:
    t2.watch(a)
    g = first_derivative(a)
  assert float(g) == pytest.approx(1.0263683, abs=1e-7)
  assert float(t2.gradient(g, a)) == pytest.approx(0.4278768, abs=1e-7)
  # The train loop vouches that its step's tapes are all inside its trace.
  with second_order.all_tapes_visible():
    assert not second_order.is_exact()


def test_exact_moments_scope_is_per_thread_and_reentrant():
  seen = {}
  barrier = threading.Barrier(2)

  def worker(name, enter):
    if enter:
      with second_order.exact_moments_scope(), second_order.exact_moments_scope():
        barrier.wait()
        seen[name] = second_order.is_exact()
        barrier.wait()
    else:
      barrier.wait()
      seen[name] = second_order.is_exact()
      barrier.wait()

  threads = [threading.Thread(target=worker, args=(n, e)) for n, e in (("a", True), ("b", False))]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert seen == {"a": True, "b": False}
  assert not second_order.is_exact()


def test_exact_moments_values_and_hessian():
  """var(x) over n values has Hessian 2/n (I - 1/n) (TensorFlow <= 2.21's tf.nn.moments
  gives 2/n I: it stops the gradient through the mean); values equal tf.nn.moments'."""
  x = tf.constant([0.3, -1.2, 2.0, 0.5], tf.float64)
  n = 4

  def hessian(moments):
    with tf.GradientTape() as outer:
      outer.watch(x)
      with tf.GradientTape() as inner:
        inner.watch(x)
        _, var = moments(x, [0])
      g = inner.gradient(var, x)
    return outer.jacobian(g, x).numpy()

  np.testing.assert_allclose(hessian(second_order.exact_moments),
                             2 / n * (np.eye(n) - 1 / n), rtol=1e-12)
  for keepdims in (False, True):
    for a, b in zip(second_order.exact_moments(x[None], [1], keepdims),
                    tf.nn.moments(x[None], [1], keepdims=keepdims)):
      np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_second_order_through_batched_weight_sets_and_forward_accumulator():
  """Second order stays exact where the tapes are outside a vectorized trace, and under a
  forward-over-backward Hessian-vector product (tf.autodiff.ForwardAccumulator)."""
  from hypernet.hypernetworks import batched  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  inputs = keras.Input((3,), dtype=F64)
  h = _tanh()(L.Dense(3, dtype=F64, name="d")(inputs))
  model = keras.Model(inputs, L.Dense(1, dtype=F64, name="o")(
      _tanh()(L.LayerNormalization(dtype=F64, name="ln")(h))))
  x = tf.constant(np.random.default_rng(0).normal(size=(2, 4, 3)))
  k0 = tf.constant(np.random.default_rng(1).normal(size=(2, 3, 3)))
  v = tf.constant(np.random.default_rng(2).normal(size=(2, 3, 3)))

  def grad(k):
    with tf.GradientTape() as tape:
      tape.watch(k)
      loss = tf.reduce_sum(tf.sin(batched.batched_functional_call(model, {"d/kernel": k}, x)))
    return tape.gradient(loss, k)

  def hvp_tapes(k):
    with tf.GradientTape() as outer:
      outer.watch(k)
      g = grad(k)
      gv = tf.reduce_sum(g * v)
    return outer.gradient(gv, k)

  def grad_one(k):  # set 0 alone, through functional_call
    with tf.GradientTape() as tape:
      tape.watch(k)
      loss = tf.reduce_sum(tf.sin(functional.functional_call(model, {"d/kernel": k}, x[0])))
    return tape.gradient(loss, k)

  def hvp_forward(k):
    with tf.autodiff.ForwardAccumulator(k, v[0]) as acc:
      g = grad_one(k)
    return acc.jvp(g)

  eps = 1e-5
  fd = (grad(k0 + eps * v) - grad(k0 - eps * v)) / (2 * eps)
  for hvp in (hvp_tapes, tf.function(hvp_tapes)):
    np.testing.assert_allclose(hvp(k0).numpy(), fd.numpy(), rtol=1e-6, atol=1e-9)
  # (TF 2.21's ForwardAccumulator fails inside vectorized_map's function with an internal
  # error, so forward-over-backward is checked on one weight set.)
  fd_one = (grad_one(k0[0] + eps * v[0]) - grad_one(k0[0] - eps * v[0])) / (2 * eps)
  for hvp in (hvp_forward, tf.function(hvp_forward)):
    np.testing.assert_allclose(hvp(k0[0]).numpy(), fd_one.numpy(), rtol=1e-6, atol=1e-9)
