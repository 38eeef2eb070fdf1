"""Chunked hypernetwork: shapes from the target, parameter counts, hyperfan init,
gradients against float64 finite differences."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import functional
from hypernet.tasks import targets
from hypernet.hypernetworks import init as hinit
from hypernet.hypernetworks.chunked import ChunkedHypernetwork


def _target(dtype="float32"):
  # Average pooling: max pooling over windows of dead ReLUs (all 0) has a kink that
  # central differences straddle, which would test the kink, not our gradient.
  return targets.make_cnn((8, 8, 1), 10, conv_widths=(4, 8), dense_widths=(16,), pool="avg",
                         dtype=dtype)


def test_generated_shapes_come_from_target_and_counts():
  target = _target()
  spec = functional.weight_spec(target, "conv*/*,dense*/*,head/*")
  hnet = ChunkedHypernetwork(spec, chunk_size=100, chunk_emb_dim=7, hidden=(11,))
  weights = hnet()
  assert list(weights) == list(spec)
  for p, s in spec.items():
    assert tuple(weights[p].shape) == tuple(s.shape) and weights[p].dtype == s.dtype
  p_total = functional.num_elements(spec)
  assert hnet.num_generated == p_total == 40 + 296 + (2 * 2 * 8 * 16 + 16) + 170
  chunks = -(-p_total // 100)
  assert hnet.count_params() == chunks * 7 + (7 * 11 + 11) + (11 * 100 + 100)


@pytest.mark.parametrize("mode,center", [("hyperfan_in", True), ("hyperfan_out", True),
                                         ("glorot", True), ("hyperfan_in", False)])
def test_initial_variance_matches_standard_init(mode, center):
  """Var of generated kernels at init = He/Glorot variance of the target layer (20%),
  with and without centring the generator's features."""
  target = targets.make_cnn((28, 28, 1), 10, conv_widths=(32, 64), dense_widths=(64,))
  spec = functional.weight_spec(target, "*/kernel")
  ratios = {p: [] for p in spec}
  for seed in range(3):
    hnet = ChunkedHypernetwork(spec, chunk_size=512, chunk_emb_dim=16, hidden=(32,),
                               init=mode, center=center, seed=seed)
    for p, w in hnet().items():
      ratios[p].append(np.var(w.numpy()) / hinit.kernel_std(p, spec[p].shape, mode) ** 2)
  for p, r in ratios.items():
    assert 0.8 < np.mean(r) < 1.2, (p, r)


@pytest.mark.parametrize("center", [True, False])
def test_centring_sets_the_output_bias(center):
  """center=True: b_out = -W_out . mean_c(h_c), so every raw chunk element has mean 0 over
  the chunks at init (exactly, float64); center=False: b_out = 0 and the raw elements
  have unit second moment over chunks and elements (W_out scaled by E[h^2])."""
  target = targets.make_cnn((28, 28, 1), 10, conv_widths=(32, 64), dense_widths=(64,))
  spec = functional.weight_spec(target, "conv*/*,dense*/*,head/*")
  hnet = ChunkedHypernetwork(spec, chunk_size=1024, chunk_emb_dim=16, hidden=(24,),
                             center=center, dtype="float64", seed=1)
  features = hnet._features().numpy()                        # [C, d_h]
  raw = hnet.output_head(features).numpy()                   # [C, k] before gain and mean
  bias = hnet.output_head.bias.numpy()
  if center:
    np.testing.assert_allclose(bias, -features.mean(0) @ hnet.output_head.kernel.numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(raw.mean(0), 0.0, atol=1e-12)
    assert 0.9 < np.mean((raw - raw.mean(0)) ** 2) < 1.1
  else:
    assert np.all(bias == 0.0)
    assert 0.9 < np.mean(raw ** 2) < 1.1
    assert np.std(raw.mean(0)) > 0.2  # The shared pattern W_out . mean(h) the centring removes.


@pytest.mark.parametrize("emb_multiplier,head_multiplier,hidden,output_major", [
    (1.0, 1.0, (8,), False), (10.0, 1.0, (8,), False), (1.0, 30.0, (8,), False),
    (1.0, 1.0, (), False), (1.0, 1.0, (8,), True)])
def test_gradients_match_float64_finite_differences(emb_multiplier, head_multiplier, hidden,
                                                    output_major):
  target = _target("float64")
  spec = functional.weight_spec(target, "conv*/*,dense*/*,head/*")
  hnet = ChunkedHypernetwork(spec, chunk_size=256, chunk_emb_dim=5, hidden=hidden,
                             dtype="float64", seed=3, emb_multiplier=emb_multiplier,
                             head_multiplier=head_multiplier, output_major=output_major)
  x = tf.random.stateless_uniform((6, 8, 8, 1), seed=[0, 1], dtype=tf.float64)
  y = tf.constant([0, 1, 2, 3, 4, 5])

  def loss_fn():
    logits = functional.functional_call(target, hnet(), x)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))

  with tf.GradientTape() as tape:
    loss = loss_fn()
  assert loss.dtype == tf.float64
  grads = tape.gradient(loss, hnet.trainable_variables)
  rng = np.random.default_rng(0)
  eps = 1e-6
  checked = 0
  for var, grad in zip(hnet.trainable_variables, grads):
    flat = var.numpy().ravel()
    for i in rng.choice(flat.size, size=min(3, flat.size), replace=False):
      orig = flat[i]
      plus, minus = flat.copy(), flat.copy()
      plus[i], minus[i] = orig + eps, orig - eps
      var.assign(plus.reshape(var.shape)); lp = float(loss_fn())
      var.assign(minus.reshape(var.shape)); lm = float(loss_fn())
      var.assign(flat.reshape(var.shape))
      fd = (lp - lm) / (2 * eps)
      np.testing.assert_allclose(grad.numpy().ravel()[i], fd, rtol=1e-5, atol=1e-9)
      checked += 1
  assert checked >= 9  # 3 per variable: embeddings, (generator,) head kernel and bias


def _one_adam_step(hnet, variables):
  """One Adam step (epsilon 1e-12: +-lr per coordinate) on ``variables`` of ``hnet`` for a
  cross-entropy loss of the generated target on 6 fixed 8x8 images."""
  x = tf.random.stateless_uniform((6, 8, 8, 1), seed=[0, 1])
  y = tf.constant([0, 1, 2, 3, 4, 5])
  with tf.GradientTape() as tape:
    logits = functional.functional_call(_target(), hnet(), x)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
  keras.optimizers.Adam(1e-3, epsilon=1e-12).apply_gradients(
      zip(tape.gradient(loss, variables), variables))


def test_emb_multiplier_same_function_m_times_faster_adam_step():
  """The multiplier changes neither the initial embeddings the generator sees nor the
  generated weights, and the first Adam step moves the effective embeddings m times as far
  (Adam's first step is lr * g / (|g| + eps), i.e. +-lr for each stored coordinate)."""
  spec = functional.weight_spec(_target(), "conv*/*,dense*/*,head/*")
  moved = {}
  for m in (1.0, 10.0):
    hnet = ChunkedHypernetwork(spec, chunk_size=256, chunk_emb_dim=5, hidden=(8,), seed=3,
                               emb_multiplier=m)
    e0 = hnet.embeddings.numpy()
    np.testing.assert_allclose(hnet.chunk_embeddings.numpy() * m, e0, rtol=1e-6)
    if m == 1.0:
      first_e0, first_w = e0, hnet()
    else:
      np.testing.assert_allclose(e0, first_e0, rtol=1e-6)
      for p, w in hnet().items():
        np.testing.assert_allclose(w.numpy(), first_w[p].numpy(), rtol=1e-5, atol=1e-6)
    _one_adam_step(hnet, hnet.trainable_variables)
    moved[m] = np.abs(hnet.embeddings.numpy() - e0)
  np.testing.assert_allclose(moved[1.0], 1e-3, rtol=1e-3)
  np.testing.assert_allclose(moved[10.0], 1e-2, rtol=1e-3)


def test_head_multiplier_same_weights_m_times_faster_adam_step_through_the_head():
  """``head_multiplier=m`` stores the output head divided by ``m``: the same generated
  weights at init, and one Adam step on the head (each stored coordinate moves +-lr, the
  gradient's signs being those of m = 1) changes every generated weight m times as much."""
  spec = functional.weight_spec(_target(), "conv*/*,dense*/*,head/*")
  moved = {}
  for m in (1.0, 10.0):
    hnet = ChunkedHypernetwork(spec, chunk_size=256, chunk_emb_dim=5, hidden=(8,), seed=3,
                               head_multiplier=m)
    w0 = {p: w.numpy() for p, w in hnet().items()}
    if m == 1.0:
      first_w, kernel = w0, hnet.output_head.kernel.numpy()
    else:
      np.testing.assert_allclose(hnet.output_head.kernel.numpy() * m, kernel, rtol=1e-6)
      for p, w in w0.items():
        np.testing.assert_allclose(w, first_w[p], rtol=1e-5, atol=1e-6)
    _one_adam_step(hnet, [hnet.output_head.kernel, hnet.output_head.bias])
    moved[m] = np.concatenate([(w.numpy() - w0[p]).ravel() for p, w in hnet().items()])
  assert np.abs(moved[1.0]).max() > 1e-5
  np.testing.assert_allclose(moved[10.0], 10.0 * moved[1.0], rtol=2e-3, atol=1e-8)


def test_linear_generator_is_a_rank_d_e_plus_1_factorisation():
  """hidden=(): the raw chunk matrix is exactly [E, 1] [W_out; b_out] (rank <= d_e + 1),
  the parameters are C d_e + (d_e + 1) k, and the init gives kernels their He variance."""
  target = targets.make_cnn((28, 28, 1), 10, conv_widths=(16, 32), dense_widths=(64,),
                           dtype="float64")
  spec = functional.weight_spec(target, "conv*/*,dense*/*,head/*")
  hnet = ChunkedHypernetwork(spec, chunk_size=1024, chunk_emb_dim=7, hidden=(),
                             dtype="float64", seed=2)
  c, k = hnet.num_chunks, 1024
  assert c == -(-105866 // 1024) == 104
  assert hnet.count_params() == c * 7 + 8 * k == 8920
  e = hnet.chunk_embeddings.numpy()
  w, b = hnet.output_head.kernel.numpy(), hnet.output_head.bias.numpy()
  raw = np.zeros(c * k)
  flat = hnet.flat_weights().numpy()
  raw[: flat.size] = (flat - hnet._mean.numpy()) / hnet._gain.numpy()  # pylint: disable=protected-access
  np.testing.assert_allclose(raw[: flat.size], (e @ w + b).ravel()[: flat.size], rtol=1e-12,
                             atol=1e-12)
  # Centred at init: b_out = -mean(E) W_out, so the chunks are (E - mean E) W_out, of
  # rank d_e (training moves b_out on its own: d_e + 1), with mean 0 over the chunks.
  np.testing.assert_allclose(b, -e.mean(0) @ w, rtol=1e-12, atol=1e-15)
  assert np.linalg.matrix_rank(e @ w + b) == 7
  np.testing.assert_allclose((e @ w + b).mean(0), 0, atol=1e-12)
  kernel = hnet()["dense1/kernel"]  # 98 of the 104 chunks
  ratio = np.var(kernel.numpy()) / hinit.kernel_std("dense1/kernel", spec["dense1/kernel"].shape,
                                                    "hyperfan_in") ** 2
  assert 0.8 < ratio < 1.2, ratio
  with pytest.raises(ValueError, match=r"hidden=\(\).*hidden layer \(hidden=\(64,\)"):
    ChunkedHypernetwork(spec, hidden=(), num_conditions=3, condition_dim=4)


def test_errors():
  with pytest.raises(ValueError, match="target_spec is empty"):
    ChunkedHypernetwork({})
  spec = functional.weight_spec(_target(), "head/kernel")
  with pytest.raises(ValueError, match="init='he' is unknown"):
    ChunkedHypernetwork(spec, init="he")
  with pytest.raises(ValueError, match="chunk_size"):
    ChunkedHypernetwork(spec, chunk_size=0)
  with pytest.raises(ValueError, match=r"^emb_multiplier \(0.0\) must be positive"):
    ChunkedHypernetwork(spec, emb_multiplier=0.0)
  # A constructor's errors name its own arguments, never a config field.
  for kwargs in (dict(emb_multiplier=0.0), dict(head_precondition=-1.0), dict(init="he"),
                 dict(hidden=(), num_conditions=2, condition_dim=3)):
    with pytest.raises(ValueError) as e:
      ChunkedHypernetwork(spec, **kwargs)
    assert "config" not in str(e.value), str(e.value)


def test_head_precondition_solves_the_damped_normal_equations():
  """Same forward pass; the features' and embeddings' gradients unchanged; the head's
  kernel and bias get (H1^T H1 + lam tr / (d_h + 1) I)^-1 H1^T G (float64, numpy)."""
  target = _target("float64")
  spec = functional.weight_spec(target, "conv*/*,dense*/*,head/*")
  x = tf.random.stateless_uniform((6, 8, 8, 1), seed=[0, 1], dtype=tf.float64)
  y = tf.constant([0, 1, 2, 3, 4, 5])
  results = {}
  for lam in (0.0, 0.1):
    hnet = ChunkedHypernetwork(spec, chunk_size=256, chunk_emb_dim=5, hidden=(8,),
                               dtype="float64", seed=3, head_precondition=lam)
    with tf.GradientTape(persistent=True) as tape:
      flat = hnet.flat_weights()
      logits = functional.functional_call(target, hnet.split(flat), x)
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    grads = dict(zip([v.path for v in hnet.trainable_variables],
                     tape.gradient(loss, hnet.trainable_variables)))
    results[lam] = (flat.numpy(), grads, tape.gradient(loss, flat).numpy(), hnet)
  flat0, plain, g_flat, hnet0 = results[0.0]
  flat1, pre, _, hnet1 = results[0.1]
  np.testing.assert_array_equal(flat0, flat1)
  head = {v.path: v for v in hnet1.output_head.weights}
  kernel_path = [p for p in head if p.endswith("kernel")][0]
  bias_path = [p for p in head if p.endswith("bias")][0]
  for path in plain:
    if path not in (kernel_path, bias_path):  # Embeddings and generator MLP.
      np.testing.assert_allclose(pre[path].numpy(), plain[path].numpy(), rtol=1e-12)
  # G: the loss gradient of the raw chunks (before gain and mean), [C, k] zero-padded.
  gain = hnet1._gain.numpy()  # pylint: disable=protected-access
  c, k = hnet1.num_chunks, hnet1.chunk_size
  g = np.zeros(c * k)
  g[: g_flat.size] = g_flat * gain
  g = g.reshape(c, k)
  h = hnet1._features().numpy()  # pylint: disable=protected-access
  h1 = np.concatenate([h, np.ones((c, 1))], 1)
  a = h1.T @ h1
  a += 0.1 * np.trace(a) / a.shape[0] * np.eye(a.shape[0])
  step = np.linalg.solve(a, h1.T @ g)
  np.testing.assert_allclose(pre[kernel_path].numpy(), step[:-1], rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(pre[bias_path].numpy(), step[-1], rtol=1e-9, atol=1e-12)
  # And the plain head gradient is H1^T G, for contrast.
  np.testing.assert_allclose(plain[kernel_path].numpy(), h.T @ g, rtol=1e-9, atol=1e-12)
  with pytest.raises(ValueError, match="head_precondition"):
    ChunkedHypernetwork(spec, chunk_size=256, head_precondition=-1.0)


def test_output_major_chunks_hold_whole_units():
  """``output_major=True``: a Dense kernel ``[in, out]`` is generated as ``[out, in]``, so
  with ``chunk_size = in`` chunk ``c`` is exactly unit ``c``'s incoming weights (column
  ``c``); Keras' layout puts input ``c``'s outgoing weights (row ``c``) there. Conv kernels
  ``[kh, kw, in, out]`` come as ``[out, kh, kw, in]``; biases as they are; with a batch of
  conditions the leading axis is kept."""
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, name="d"),
                            keras.layers.Dense(3, name="o")])
  spec = functional.weight_spec(model)
  for output_major in (False, True):
    hnet = ChunkedHypernetwork(spec, chunk_size=6, chunk_emb_dim=3, hidden=(5,),
                               output_major=output_major, num_conditions=2, condition_dim=2)
    weights = hnet([0, 1])
    flat = hnet.flat_weights(condition=hnet.condition_vectors([0, 1])).numpy()
    kernel = weights["d/kernel"].numpy()                        # [S=2, in=6, out=4]
    chunks = flat[:, :24].reshape(2, 4, 6)                      # [S, C, chunk_size]
    if output_major:   # chunk c = unit c's 6 incoming weights = kernel[:, :, c]
      np.testing.assert_allclose(kernel.transpose(0, 2, 1), chunks, rtol=1e-6)
    else:              # row-major [in, out]: input i's 4 outgoing weights, in order
      np.testing.assert_allclose(kernel, flat[:, :24].reshape(2, 6, 4), rtol=1e-6)
    np.testing.assert_allclose(weights["d/bias"].numpy(), flat[:, 24:28], rtol=1e-6)
    o_kernel = flat[:, 28:40].reshape((2, 3, 4) if output_major else (2, 4, 3))
    np.testing.assert_allclose(weights["o/kernel"].numpy(),
                               o_kernel.transpose(0, 2, 1) if output_major else o_kernel,
                               rtol=1e-6)

  conv = _target()
  spec = functional.weight_spec(conv, "conv*/kernel")
  hnet = ChunkedHypernetwork(spec, chunk_size=100, chunk_emb_dim=3, hidden=(5,),
                             output_major=True)
  kernel, flat = hnet()[list(spec)[0]].numpy(), hnet.flat_weights().numpy()
  shape = tuple(spec[list(spec)[0]].shape)                     # (3, 3, 1, 4)
  np.testing.assert_allclose(
      kernel, flat[:kernel.size].reshape((shape[-1],) + shape[:-1]).transpose(1, 2, 3, 0),
      rtol=1e-6)
