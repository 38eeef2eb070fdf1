"""The fused BatchNorm -> ReLU -> 2x2 max-pool CPU kernel (hypernet/numerics/norm_relu_pool.py).

Checks: float64 values, first and second derivatives against the same block written
with TensorFlow ops (nested tapes), ties, the conv bias passed as ``shift``, a
hand-computed case, no third derivative; the dispatch in traced meta-learners' calls of
conv4 (same loss, gradients, moving statistics and second-order MAML meta-gradients as
TensorFlow's separate ops), what is not dispatched, the fallback when the kernel cannot
be compiled, and the Trainer's ``fused_blocks`` switch.
"""
import collections
import os
import shutil
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import forked
from hypernet.core import functional
from hypernet.numerics import norm_relu_pool
from hypernet.training import loop
from hypernet.meta import conv4, inner_loop, meta_batch

from test_meta_batch import synthetic_fewshot_batch
from test_meta_tasks import _digits_config
from test_plain_bias import _op_types


def _unfused(fn):
  """``fn`` with fusion disabled inside it (a switch counts in the trace it is entered in)."""
  def run(*args):
    with norm_relu_pool.disabled():
      return fn(*args)
  return run

EPS = 2.0 ** -10  # exactly representable in float32: the op's epsilon attr is a float32
OP = "HypernetNormReluPool"


def reference(x, gamma, beta, epsilon, shift=None):
  """The block with TensorFlow's ops: batch moments over N, H, W (biased variance),
  normalise, ReLU, 2x2 max-pool (valid, stride 2)."""
  if shift is not None:
    x = x + shift
  mean = tf.reduce_mean(x, [0, 1, 2])
  variance = tf.reduce_mean(tf.square(x - mean), [0, 1, 2])
  z = gamma * (x - mean) / tf.sqrt(variance + epsilon) + beta
  return tf.nn.max_pool2d(tf.nn.relu(z), 2, 2, "VALID"), mean, variance


def _as_np(t, like=None):
  if t is None:
    return np.zeros(like.shape, like.dtype.as_numpy_dtype)
  return t.numpy()


def _close(got, want, rel, what=""):
  """``got`` within ``rel`` of ``want``, relative to ``want``'s largest entry."""
  scale = max(float(np.abs(want).max()), 1e-300)
  np.testing.assert_allclose(got, want, rtol=rel, atol=rel * scale, err_msg=what)


def _derivatives(fn, x, gamma, beta, probes, order=2):
  """Values, first derivatives wrt x, gamma, beta of L = <y, w> + <mean, wm> +
  <variance, wv>, and derivatives of L2 = <dx, v> + <dgamma, vg> + <dbeta, vb> (a
  random linear functional of the first derivatives), as numpy arrays (None -> 0)."""
  w, wm, wv, v, vg, vb = probes
  inputs = [x, gamma, beta]
  with tf.GradientTape() as t2:
    t2.watch(inputs)
    with tf.GradientTape() as t1:
      t1.watch(inputs)
      y, mean, variance = fn(x, gamma, beta, EPS)
      loss = (tf.reduce_sum(y * w) + tf.reduce_sum(mean * wm)
              + tf.reduce_sum(variance * wv))
    first = t1.gradient(loss, inputs)
    first = [tf.zeros_like(a) if g is None else g for g, a in zip(first, inputs)]
    loss2 = (tf.reduce_sum(first[0] * v) + tf.reduce_sum(first[1] * vg)
             + tf.reduce_sum(first[2] * vb))
  second = t2.gradient(loss2, inputs) if order >= 2 else [None] * 3
  out = {"y": y.numpy(), "mean": mean.numpy(), "variance": variance.numpy()}
  out.update({f"d{n}": g.numpy() for n, g in zip(("x", "gamma", "beta"), first)})
  out.update({f"dd{n}": _as_np(g, a) for n, g, a in zip(("x", "gamma", "beta"), second,
                                                        inputs)})
  return out


def _probes(rng, shape, dtype=tf.float64):
  n, h, w, c = shape
  t = lambda *s: tf.constant(rng.normal(size=s), dtype)
  return t(n, h // 2, w // 2, c), t(c), t(c), t(n, h, w, c), t(c), t(c)


# -- the op against TensorFlow's separate ops, float64 ----------------------------------
@pytest.mark.parametrize("shape", [(3, 6, 6, 4), (2, 7, 5, 3)])
def test_float64_values_first_and_second_derivatives_match_reference(shape):
  """Even and odd H / W (the last row / column counts in the moments only), a negative
  gamma channel (pooling picks the smallest x), gamma == 0 with beta > 0 (every window
  ties: the first value is picked, as MaxPool's gradient does)."""
  rng = np.random.default_rng(sum(shape))
  c = shape[-1]
  x = tf.constant(rng.normal(size=shape) + 0.3, tf.float64)
  gamma = np.array([1.3, -0.7, 0.0, 0.9][:c] if c == 4 else [-1.1, 0.0, 0.8])
  beta = rng.normal(size=c) * 0.5
  beta[gamma == 0] = 0.4
  gamma, beta = tf.constant(gamma), tf.constant(beta)
  probes = _probes(rng, shape)
  ours = _derivatives(norm_relu_pool.norm_relu_pool, x, gamma, beta, probes)
  ref = _derivatives(reference, x, gamma, beta, probes)
  assert ours["y"].shape == (shape[0], shape[1] // 2, shape[2] // 2, c)
  assert np.count_nonzero(ours["y"]) > ours["y"].size // 4  # ReLU passes some, not all
  assert np.count_nonzero(ours["y"]) < ours["y"].size
  for k, want in ref.items():
    _close(ours[k], want, 1e-9, k)
  # Not trivially zero (beta's second derivative is: piecewise constant ReLU mask).
  for k in ("dx", "dgamma", "dbeta", "ddx", "ddgamma"):
    assert np.abs(ours[k]).max() > 1e-3, k


def test_float32_channel_mean_large_against_its_spread():
  """A channel whose mean is 100 standard deviations from zero (a conv output with a
  large offset): float32 values and first and second derivatives stay as close to the
  float64 ones as TensorFlow's float32 ops get. Summing x and x^2 (E[x^2] - mean^2)
  lost the variance here (a new user's report: y off by 1e-4, meta-gradients by 1e-3)."""
  rng = np.random.default_rng(11)
  shape = (4, 8, 8, 3)
  x64 = rng.normal(size=shape) + 100.0
  gamma64, beta64 = np.array([0.9, -1.2, 0.6]), np.array([0.1, 0.3, -0.2])
  probes = _probes(rng, shape)
  want = _derivatives(reference, tf.constant(x64), tf.constant(gamma64),
                      tf.constant(beta64), probes)
  as32 = lambda a: tf.constant(a, tf.float32)
  probes32 = [tf.cast(p, tf.float32) for p in probes]
  got = _derivatives(norm_relu_pool.norm_relu_pool, as32(x64), as32(gamma64),
                     as32(beta64), probes32)
  tf_ops = _derivatives(reference, as32(x64), as32(gamma64), as32(beta64), probes32)
  for k in ("y", "variance", "dx", "dgamma", "dbeta", "ddx", "ddgamma"):
    err = np.abs(got[k] - want[k]).max() / np.abs(want[k]).max()
    err_tf = np.abs(tf_ops[k] - want[k]).max() / np.abs(want[k]).max()
    assert err <= max(3.0 * err_tf, 1e-5), (k, err, err_tf)


def test_ties_send_the_gradient_to_the_first_maximum():
  """Integer x: many equal values in a window (and z exactly 0 where x equals the channel
  mean and beta == 0). Values and first derivatives still match MaxPool's gradient, which
  goes to the first maximum in row-major order, for positive and negative gamma."""
  rng = np.random.default_rng(11)
  shape = (2, 4, 4, 4)  # 32 values per channel: dyadic means, exact
  x = rng.integers(0, 3, size=shape).astype(np.float64)
  x[0, 0:2, 0:2, :] = 1.0  # a window of four equal values in every channel
  rest = np.ones(shape[:3], bool)
  rest[0, 0:2, 0:2] = False
  for ch in (1, 2):  # mean exactly 1 (beta == 0 there): z == 0 exactly where x == 1
    x[..., ch][rest] = rng.permutation([0.0] * 8 + [1.0] * 12 + [2.0] * 8)
  x = tf.constant(x)
  gamma = tf.constant([1.2, -0.8, 0.6, -1.5], tf.float64)
  beta = tf.constant([0.3, 0.0, 0.0, 0.4], tf.float64)
  probes = _probes(rng, shape)
  ours = _derivatives(norm_relu_pool.norm_relu_pool, x, gamma, beta, probes, order=1)
  ref = _derivatives(reference, x, gamma, beta, probes, order=1)
  assert ours["mean"][1] == ours["mean"][2] == 1.0
  for k in ("y", "mean", "variance", "dx", "dgamma", "dbeta"):
    _close(ours[k], ref[k], 1e-12, k)
  # Windows whose pooled z is exactly 0 pass no gradient (ReLU's derivative at 0 is 0).
  assert (ours["y"][0, 0, 0, 1:3] == 0).all()
  # Directly: d y[0, 0, 0, c] / dx sends the selected-position term to x[0, 0, 0, c].
  with tf.GradientTape() as tape:
    tape.watch(x)
    y, _, _ = norm_relu_pool.norm_relu_pool(x, gamma, beta, EPS)
    picked = y[0, 0, 0, 0]
  g = tape.gradient(picked, x).numpy()[0, 0:2, 0:2, 0]
  # All four equal: the same mean / variance terms, plus gamma r at the first only.
  assert float(picked) > 0
  assert g[0, 0] - g[0, 1] > 0.1 and g[0, 1] == g[1, 0] == g[1, 1]


def test_gamma_zero_ties_like_max_pool():
  """gamma_c == 0 and beta_c > 0: every window of relu(z) ties at relu(beta_c), and
  MaxPool's gradient goes to the window's first value; so does the kernel's (dgamma sums
  g xhat there)."""
  rng = np.random.default_rng(3)
  shape = (2, 4, 4, 3)
  x = tf.constant(rng.normal(size=shape), tf.float64)
  gamma = tf.constant([1.0, 0.0, -1.0], tf.float64)
  beta = tf.constant([0.1, 0.5, 0.2], tf.float64)
  probes = _probes(rng, shape)
  ours = _derivatives(norm_relu_pool.norm_relu_pool, x, gamma, beta, probes, order=1)
  ref = _derivatives(reference, x, gamma, beta, probes, order=1)
  for k in ("y", "dx", "dbeta"):  # these agree
    _close(ours[k], ref[k], 1e-12, k)
  _close(ours["dgamma"], ref["dgamma"], 1e-12, "dgamma")


def test_shift_changes_only_the_mean_and_gets_the_mean_gradient():
  rng = np.random.default_rng(5)
  shape = (2, 6, 4, 3)
  x = tf.constant(rng.normal(size=shape), tf.float64)
  gamma = tf.constant([0.9, -1.3, 0.5], tf.float64)
  beta = tf.constant([0.2, 0.1, -0.3], tf.float64)
  s = tf.Variable([0.5, -2.0, 3.0], dtype=tf.float64)
  w, wm, wv = _probes(rng, shape)[:3]
  y0, m0, v0 = norm_relu_pool.norm_relu_pool(x, gamma, beta, EPS)
  with tf.GradientTape() as outer:
    shift = 2.0 * s  # upstream of shift: the outer tape must record its zero gradient
    with tf.GradientTape(persistent=True) as tape:
      tape.watch([x, shift])
      y, mean, variance = norm_relu_pool.norm_relu_pool(x, gamma, beta, EPS, shift=shift)
      only_y = tf.reduce_sum(y * w)
      full = only_y + tf.reduce_sum(mean * wm) + tf.reduce_sum(variance * wv)
    g_only_y = tape.gradient(only_y, shift)
    g_full, gx_full = tape.gradient(full, [shift, x])
  np.testing.assert_array_equal(y.numpy(), y0.numpy())
  np.testing.assert_array_equal(variance.numpy(), v0.numpy())
  np.testing.assert_array_equal(mean.numpy(), m0.numpy() + shift.numpy())
  _close(m0.numpy(), x.numpy().mean(axis=(0, 1, 2)), 1e-14)
  # d/d shift = d/d mean, exactly; zero through y, exactly, and recorded.
  np.testing.assert_array_equal(g_full.numpy(), wm.numpy())
  assert g_only_y is not None
  np.testing.assert_array_equal(g_only_y.numpy(), np.zeros(3))
  upstream = outer.gradient(g_only_y, s)
  assert upstream is not None
  np.testing.assert_array_equal(upstream.numpy(), np.zeros(3))
  # The same as TensorFlow's ops on x + shift (there the shift gradient is a sum that
  # cancels up to rounding).
  with tf.GradientTape() as tape:
    tape.watch([x, shift])
    ry, rm, rv = reference(x, gamma, beta, EPS, shift=shift)
    ref_full = tf.reduce_sum(ry * w) + tf.reduce_sum(rm * wm) + tf.reduce_sum(rv * wv)
  r_shift, r_x = tape.gradient(ref_full, [shift, x])
  _close(y.numpy(), ry.numpy(), 1e-12)
  _close(mean.numpy(), rm.numpy(), 1e-14)
  _close(variance.numpy(), rv.numpy(), 1e-12)
  _close(g_full.numpy(), r_shift.numpy(), 1e-12)
  _close(gx_full.numpy(), r_x.numpy(), 1e-12)


@pytest.mark.parametrize("gamma", [1.5, -1.5])
def test_hand_computed_block(gamma):
  """x = [[1, 2], [3, 4]] (one channel): mean 2.5, variance 1.25; the pool picks 4
  (gamma > 0) or 1 (gamma < 0): y = relu(gamma (x_sel - 2.5) r + beta), r = 1 /
  sqrt(1.25 + eps), and dy/dx_j = gamma r (delta_sel,j - 1/4 - xhat_sel xhat_j / 4)."""
  x = tf.constant([1.0, 2.0, 3.0, 4.0], tf.float64, shape=[1, 2, 2, 1])
  g, beta = tf.constant([gamma], tf.float64), tf.constant([-0.25], tf.float64)
  with tf.GradientTape() as tape:
    tape.watch([x, g, beta])
    y, mean, variance = norm_relu_pool.norm_relu_pool(x, g, beta, EPS)
    out = y[0, 0, 0, 0]
  dx, dgamma, dbeta = tape.gradient(out, [x, g, beta])
  r = 1.0 / np.sqrt(1.25 + EPS)
  xs = np.array([1.0, 2.0, 3.0, 4.0])
  xhat = (xs - 2.5) * r
  sel = 3 if gamma > 0 else 0
  assert y.shape == (1, 1, 1, 1)
  assert mean.numpy().tolist() == [2.5] and variance.numpy().tolist() == [1.25]
  np.testing.assert_allclose(float(out), max(gamma * xhat[sel] - 0.25, 0.0), rtol=1e-15)
  assert float(out) > 0
  want = gamma * r * ((np.arange(4) == sel) - 0.25 - xhat[sel] * xhat / 4)
  np.testing.assert_allclose(dx.numpy().ravel(), want, rtol=1e-13, atol=1e-15)
  assert dx.numpy().ravel()[sel] > 0 if gamma > 0 else dx.numpy().ravel()[sel] < 0
  np.testing.assert_allclose(float(dgamma[0]), xhat[sel], rtol=1e-14)
  assert float(dbeta[0]) == 1.0
  # With beta far negative the ReLU stops everything: y = 0, no gradient.
  with tf.GradientTape() as tape:
    tape.watch(x)
    y, _, _ = norm_relu_pool.norm_relu_pool(x, g, beta - 10.0, EPS)
  assert float(y[0, 0, 0, 0]) == 0.0
  np.testing.assert_array_equal(tape.gradient(y, x).numpy(), np.zeros([1, 2, 2, 1]))


def test_third_derivative_raises_lookup_error():
  rng = np.random.default_rng(9)
  x = tf.constant(rng.normal(size=(2, 4, 4, 2)), tf.float64)
  gamma, beta = tf.constant([1.1, -0.6], tf.float64), tf.constant([0.2, 0.3], tf.float64)
  w = tf.constant(rng.normal(size=(2, 2, 2, 2)), tf.float64)
  v = tf.constant(rng.normal(size=(2, 4, 4, 2)), tf.float64)
  with tf.GradientTape() as t3:
    t3.watch(x)
    with tf.GradientTape() as t2:
      t2.watch(x)
      with tf.GradientTape() as t1:
        t1.watch(x)
        y, _, _ = norm_relu_pool.norm_relu_pool(x, gamma, beta, EPS)
        loss = tf.reduce_sum(y * w)
      loss2 = tf.reduce_sum(t1.gradient(loss, x) * v)
    hx = t2.gradient(loss2, x)
    assert np.abs(hx.numpy()).max() > 0
    loss3 = tf.reduce_sum(hx * v)
  with pytest.raises(LookupError, match="HypernetNormReluPoolGradGrad"):
    t3.gradient(loss3, x)


# -- dispatch in traced functional calls ------------------------------------------------
def _conv4(seed=0, **kwargs):
  """conv4 (3-way, 16x16x1, 4 filters) with random conv biases, gammas of both signs,
  betas and moving statistics."""
  keras.utils.set_random_seed(seed)
  model = conv4.make_conv4(3, (16, 16, 1), filters=4, **kwargs)
  rng = np.random.default_rng(seed + 100)
  for path, v in functional.variable_paths(model).items():
    if path.endswith("gamma"):
      v.assign(rng.choice([-1, 1], v.shape) * rng.uniform(0.5, 1.5, v.shape))
    elif path.endswith(("beta", "bias", "moving_mean")):
      v.assign(rng.normal(0.0, 0.3, v.shape))
    elif path.endswith("moving_variance"):
      v.assign(rng.uniform(0.5, 2.0, v.shape))
  return model


def _weights(model):
  return {p: tf.convert_to_tensor(v) for p, v in functional.variable_paths(
      model, trainable=True).items()}


def _loss_grads_state(model, weights, x, labels):
  with tf.GradientTape() as tape:
    tape.watch(weights)
    out, state = functional.functional_call(model, weights, x, training=True,
                                            return_state=True, accelerate="meta")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, out))
  return loss, tape.gradient(loss, weights), state


def test_conv4_traced_call_fuses_every_block_with_the_same_values(monkeypatch):
  model = _conv4()
  weights = _weights(model)
  rng = np.random.default_rng(1)
  x = tf.constant(rng.normal(size=(6, 16, 16, 1)), tf.float32)
  labels = tf.constant(np.arange(6) % 3)
  fn = lambda weights, x: _loss_grads_state(model, weights, x, labels)

  fused = tf.function(fn).get_concrete_function(weights, x)
  unfused = tf.function(_unfused(fn)).get_concrete_function(weights, x)
  ops, ref_ops = _op_types(fused), _op_types(unfused)
  assert ops[OP] == 4 and ops[OP + "Grad"] == 4 and ops["MaxPool"] == 0, ops
  assert ref_ops[OP] == 0 and ref_ops[OP + "Grad"] == 0 and ref_ops["MaxPool"] == 4

  loss, grads, state = fused(weights, x)
  ref_loss, ref_grads, ref_state = unfused(weights, x)
  np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
  assert sorted(grads) == sorted(weights)
  for p in weights:
    np.testing.assert_allclose(grads[p].numpy(), ref_grads[p].numpy(), rtol=1e-4, atol=1e-6,
                               err_msg=p)
    if p.endswith("kernel") or p.endswith(("gamma", "beta")):
      assert np.abs(grads[p].numpy()).max() > 1e-4, p
  for i in range(1, 5):  # the bias before a BatchNorm: exactly zero through the kernel
    np.testing.assert_array_equal(grads[f"conv{i}/bias"].numpy(), np.zeros(4))
  moving = [f"bn{i}/moving_{s}" for i in range(1, 5) for s in ("mean", "variance")]
  variables = functional.variable_paths(model)
  assert sorted(state) == sorted(moving)
  for p in moving:
    np.testing.assert_allclose(state[p].numpy(), ref_state[p].numpy(), rtol=1e-4, atol=1e-6,
                               err_msg=p)
    assert not np.allclose(state[p].numpy(), variables[p].numpy())  # really updated

  # Eagerly nothing is fused (the kernel's entry point is never called), same values.
  calls = []
  original = norm_relu_pool.norm_relu_pool
  monkeypatch.setattr(norm_relu_pool, "norm_relu_pool",
                      lambda *a, **k: calls.append(1) or original(*a, **k))
  eager_loss, eager_grads, _ = fn(weights, x)
  assert not calls
  tf.function(fn).get_concrete_function(weights, x)  # the spy sees a traced call
  assert len(calls) == 4
  np.testing.assert_allclose(float(eager_loss), float(ref_loss), rtol=1e-5)
  np.testing.assert_allclose(eager_grads["conv1/kernel"].numpy(),
                             ref_grads["conv1/kernel"].numpy(), rtol=1e-4, atol=1e-6)


def test_second_order_maml_meta_gradients_through_the_kernel():
  model = _conv4(seed=2)
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.3)
  variables = model.trainable_variables
  batch = synthetic_fewshot_batch(tasks=2, ways=3, shots=1, queries=2, size=16, seed=3)
  fn = lambda batch: meta_batch.meta_batch_gradients(learner, batch, variables)
  fused = tf.function(fn).get_concrete_function(batch)
  unfused = tf.function(_unfused(fn)).get_concrete_function(batch)
  ops = _op_types(fused)
  assert ops[OP] > 0 and ops[OP + "GradGrad"] > 0 and ops["MaxPool"] == 0, ops
  assert _op_types(unfused)[OP] == 0
  result, ref = fused(batch), unfused(batch)
  np.testing.assert_allclose(float(result.loss), float(ref.loss), rtol=1e-5)
  for v, g, r in zip(variables, result.variable_grads, ref.variable_grads):
    np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-3, atol=1e-5, err_msg=v.path)
  nonzero = [v.path for v, g in zip(variables, result.variable_grads)
             if np.abs(g.numpy()).max() > 1e-3]
  assert len(nonzero) >= 12, nonzero  # kernels, gammas, betas, head (not the conv biases)
  # The meta-gradient differs from the first-order one: the second derivative counts.
  fo = inner_loop.FirstOrderMAML(model, "sparse_softmax_cross_entropy", inner_lr=0.3)
  first = tf.function(lambda batch: meta_batch.meta_batch_gradients(fo, batch, variables))(
      batch)
  assert max(np.abs(g.numpy() - f.numpy()).max() for g, f in zip(
      result.variable_grads, first.variable_grads)) > 1e-4


def _block_model(case):
  keras.utils.set_random_seed(4)
  layers = [keras.Input((6, 6, 2)), keras.layers.Conv2D(3, 3, padding="same", name="conv")]
  if case != "no_batch_norm":
    layers.append(keras.layers.BatchNormalization(name="bn"))
  if case != "no_relu":
    layers.append(keras.layers.ReLU())
  layers.append({"pool3": keras.layers.MaxPooling2D(3),
                 "same": keras.layers.MaxPooling2D(2, padding="same"),
                 "strides1": keras.layers.MaxPooling2D(2, strides=1)}.get(
                     case, keras.layers.MaxPooling2D(2)))
  layers += [keras.layers.Flatten(), keras.layers.Dense(2, name="dense")]
  return keras.Sequential(layers)


@pytest.mark.parametrize("case", ["eligible", "pool3", "same", "strides1", "no_batch_norm",
                                  "no_relu"])
def test_dispatch_only_for_a_2x2_valid_pool_of_a_fused_batch_norm_relu(case):
  model = _block_model(case)
  weights = _weights(model)
  x = tf.constant(np.random.default_rng(6).normal(size=(4, 6, 6, 2)), tf.float32)
  labels = tf.constant([0, 1, 1, 0])
  fn = lambda weights, x: _loss_grads_state(model, weights, x, labels)[:2]
  ours = tf.function(fn).get_concrete_function(weights, x)
  ref = tf.function(_unfused(fn)).get_concrete_function(weights, x)
  ops = _op_types(ours)
  assert ops[OP] == (1 if case == "eligible" else 0), ops
  assert ops["MaxPool"] == (0 if case == "eligible" else 1), ops
  (loss, grads), (ref_loss, ref_grads) = ours(weights, x), ref(weights, x)
  if case == "eligible":
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
  else:
    assert float(loss) == float(ref_loss)
  for p in weights:
    if case == "no_batch_norm" and p == "conv/bias":
      # conv -> ReLU -> pool without BatchNorm runs pool first (tests/test_pool_first.py):
      # the bias gradient is the same sum over the pooled tensor, equal to rounding.
      np.testing.assert_allclose(grads[p].numpy(), ref_grads[p].numpy(), rtol=1e-6,
                                 err_msg=p)
    elif case == "eligible":
      np.testing.assert_allclose(grads[p].numpy(), ref_grads[p].numpy(), rtol=1e-4,
                                 atol=1e-6, err_msg=p)
    else:
      np.testing.assert_array_equal(grads[p].numpy(), ref_grads[p].numpy(), err_msg=p)


# Scripts that need a process of their own (the kernel module's first build or load under
# a compiler of its own), by name; each test's is defined above it.
_FRESH_SCRIPTS = {}

@pytest.fixture(scope="module")
def fresh_processes(tmp_path_factory):
  """Runs the scripts of ``_FRESH_SCRIPTS`` in fresh processes (children forked before any
  hypernet import, one launch of Python for all), each with an empty kernel cache and
  its compiler: ``/bin/false`` for ``no_compiler``; for ``fallback_flags`` (left out
  without a C++ compiler) a wrapper of g++ that fails as g++ 12 does on an AVX512-FP16
  CPU unless ``-mno-avx512fp16`` is given. ``{name: (status, stdout, stderr, cache)}``."""
  folder = tmp_path_factory.mktemp("fresh")
  compilers = {"no_compiler": "/bin/false"}
  cxx = shutil.which("g++") or shutil.which("c++")
  if cxx is not None:
    wrapper = folder / "cxx"
    wrapper.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        for a in "$@"; do [ "$a" = -mno-avx512fp16 ] && exec {cxx} "$@"; done
        echo "PacketMathFP16.h:740:49: error: expected initializer before '<' token" >&2
        exit 1
    """))
    wrapper.chmod(0o755)
    compilers["fallback_flags"] = str(wrapper)
  runs = {}
  for name, compiler in compilers.items():
    (folder / f"{name}_cache").mkdir()
    runs[name] = (textwrap.dedent(_FRESH_SCRIPTS[name]),
                  {"HYPERNET_KERNEL_CACHE": str(folder / f"{name}_cache"), "CXX": compiler}, [])
  env = dict(os.environ, KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="",
             TF_CPP_MIN_LOG_LEVEL="2")
  return {name: (*result, folder / f"{name}_cache")
          for name, result in forked.run_each(folder, runs, env, 300).items()}


_FRESH_SCRIPTS["no_compiler"] = """
      import collections, os
      os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
      import keras, numpy as np, tensorflow as tf
      from hypernet.core import functional
      from hypernet.numerics import norm_relu_pool
      from hypernet.meta import conv4
      assert norm_relu_pool.library() is None
      assert norm_relu_pool.load_error() and "/bin/false" in norm_relu_pool.load_error()
      assert "could not compile" in norm_relu_pool.load_error()
      assert not os.listdir(os.environ["HYPERNET_KERNEL_CACHE"])  # nothing half-written
      model = conv4.make_conv4(3, (16, 16, 1), filters=4)
      w = {p: tf.convert_to_tensor(v)
           for p, v in functional.variable_paths(model, trainable=True).items()}
      x = tf.constant(np.random.default_rng(0).normal(size=(4, 16, 16, 1)), tf.float32)
      def f(w, x):
        with tf.GradientTape() as tape:
          tape.watch(w)
          out = functional.functional_call(model, w, x, training=True, accelerate="meta")
          loss = tf.reduce_sum(out ** 2)
        return loss, tape.gradient(loss, w)
      concrete = tf.function(f).get_concrete_function(w, x)
      ops = collections.Counter(n.op for n in concrete.graph.as_graph_def().node)
      assert ops["HypernetNormReluPool"] == 0 and ops["MaxPool"] == 4, ops
      loss, grads = concrete(w, x)
      assert np.isfinite(float(loss)) and np.abs(grads["conv1/kernel"].numpy()).max() > 0
      print("FALLBACK-OK")
"""


def test_without_a_compiler_everything_runs_on_tensorflow_ops(fresh_processes):
  # CXX=/bin/false, an empty kernel cache.
  status, out, err, _ = fresh_processes["no_compiler"]
  assert status == 0 and "FALLBACK-OK" in out, err[-3000:]
  assert "kernel is unavailable" in err  # the warning says why


_FRESH_SCRIPTS["fallback_flags"] = """
      import os
      import numpy as np, tensorflow as tf
      from hypernet.numerics import norm_relu_pool
      assert norm_relu_pool.library() is not None, norm_relu_pool.load_error()
      x = tf.constant(np.random.default_rng(0).normal(size=(2, 4, 4, 3)), tf.float32)
      y, mean, var = norm_relu_pool.norm_relu_pool(x, tf.ones([3]), tf.zeros([3]), 1e-3)
      ref = tf.nn.max_pool2d(tf.nn.relu(tf.nn.batch_normalization(
          x, tf.reduce_mean(x, [0, 1, 2]), tf.math.reduce_variance(x, [0, 1, 2]),
          tf.zeros([3]), tf.ones([3]), 1e-3)), 2, 2, "VALID")
      np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
      report = norm_relu_pool.build_report()
      assert "-mno-avx512fp16" in report["flags"].split(), report
      assert report["loaded"] and "avx512_fp16" not in report["isa"], report
      print("FALLBACK-FLAGS-OK")
"""


def test_a_compiler_that_fails_on_the_native_flags_gets_the_fallback_flags(fresh_processes):
  # g++ 12 with -march=native on an AVX512-FP16 CPU fails on TensorFlow's Eigen headers
  # (PacketMathFP16.h); a wrapper compiler fails the same way unless -mno-avx512fp16 is
  # given, so the kernel must still be built, on every machine.
  if "fallback_flags" not in fresh_processes:
    pytest.skip("no C++ compiler")
  status, out, err, cache = fresh_processes["fallback_flags"]
  assert status == 0 and "FALLBACK-FLAGS-OK" in out, err[-3000:]
  # The kernel and the flags it was built with (build_report), nothing half-written.
  assert sorted(f.rsplit(".", 1)[-1] for f in os.listdir(cache)) == ["flags", "so"]


def test_trainer_fused_blocks_switch_and_same_step(tmp_path, monkeypatch):
  calls = []
  original = norm_relu_pool.norm_relu_pool
  monkeypatch.setattr(norm_relu_pool, "norm_relu_pool",
                      lambda *a, **k: calls.append(1) or original(*a, **k))
  c = _digits_config()
  trainer = loop.Trainer(c, str(tmp_path / "on"))
  assert trainer.fused_blocks is True
  c_off = _digits_config()
  c_off.meta.fused_blocks = False
  off = loop.Trainer(c_off, str(tmp_path / "off"))
  assert off.fused_blocks is False
  c_jit = _digits_config()
  c_jit.jit_compile = "true"
  assert loop.Trainer(c_jit, str(tmp_path / "jit")).fused_blocks is False
  # One step each from the same weights: same loss, gradient norm and updated weights.
  for a, b in zip(off.variables, trainer.variables):
    a.assign(b)
  m_on, bad_on = trainer.train_chunk(trainer.train_iterator(0), 1)
  assert calls  # the kernel computed the blocks
  del calls[:]
  m_off, bad_off = off.train_chunk(off.train_iterator(0), 1)
  assert not calls
  assert bad_on == bad_off == -1
  for k in ("loss", "grad_norm"):
    np.testing.assert_allclose(m_on[k], m_off[k], rtol=1e-4, err_msg=k)
  for a, b in zip(trainer.variables, off.variables):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6, err_msg=a.path)
