"""Tests for the hypernetwork kinds: MLP, chunked, Ha et al. static, conditional; hyperfan
init; float64 finite-difference gradients; quantised generated weights; errors."""
import importlib.util

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO_ROOT
from hypernet.core import functional, ops
from hypernet.tasks import targets
from hypernet.hypernetworks import source as sources
from hypernet.hypernetworks import base, init as hinit
from hypernet.hypernetworks.batched import batched_functional_call
from hypernet.hypernetworks.chunked import ChunkedHypernetwork
from hypernet.hypernetworks.mlp import MLPHypernetwork
from hypernet.hypernetworks.static import StaticHypernetwork

KINDS = ["mlp", "chunked", "static"]


def load_config(name):
  spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "configs" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def make_hnet(kind, spec, values=None, **kw):
  if kind == "mlp":
    return MLPHypernetwork(spec, target_values=values, embedding_dim=kw.pop("embedding_dim", 6),
                           hidden=kw.pop("hidden", (16,)), **kw)
  if kind == "chunked":
    return ChunkedHypernetwork(spec, target_values=values, chunk_size=kw.pop("chunk_size", 64),
                               chunk_emb_dim=8, hidden=kw.pop("hidden", (16,)), **kw)
  return StaticHypernetwork(spec, target_values=values, z_dim=kw.pop("z_dim", 4),
                            slice_in=4, slice_out=4, **kw)


def small_target(dtype="float64"):
  """A smooth (tanh, average pooling) CNN, so that finite differences are exact."""
  return keras.Sequential([
      keras.Input((6, 6, 2), dtype=dtype),
      keras.layers.Conv2D(4, 3, padding="same", activation="tanh", name="conv1", dtype=dtype),
      keras.layers.Conv2D(8, 3, strides=2, activation="tanh", name="conv2", dtype=dtype),
      keras.layers.Flatten(dtype=dtype),
      keras.layers.Dense(3, name="head", dtype=dtype),
  ], name="target")


def generated_patterns(kind):
  return "conv*/kernel" if kind == "static" else "conv*/*,head/*"


# ----------------------------------------------------------------------------------------
# The Ha et al. MNIST setting: exact parameter counts.
# ----------------------------------------------------------------------------------------

def test_ha_mnist_setting_counts_4244_against_12544():
  config = load_config("fmnist_ha_static")
  target = targets.make_target(config.model, (28, 28, 1), 10)
  assert tuple(functional.variable_paths(target)["conv2/kernel"].shape) == (7, 7, 16, 16)
  source = sources.build_weight_source(config, target)
  counts = source.parameter_counts()
  assert counts["source"] == 4244      # z 4 + W_i 16*4*4 + B_i 16*4 + W_out 4*784 + B_out 784
  assert counts["generated"] == 12544  # 7 * 7 * 16 * 16
  assert source.generated_paths == ["conv2/kernel"]
  w = source.weights()["conv2/kernel"]
  assert w.shape == (7, 7, 16, 16) and w.dtype == tf.float32


def test_static_tiles_larger_kernels_from_shared_generator():
  spec = {"a/kernel": tf.TensorSpec((3, 3, 32, 48)), "b/kernel": tf.TensorSpec((3, 3, 1, 16))}
  h = StaticHypernetwork(spec, z_dim=4, slice_in=16, slice_out=16)
  assert h.grids == [(2, 3), (1, 1)] and h.num_tiles == 7
  # Embeddings per tile, one generator: 7*4 + 16*(4*4 + 4) + 4*144 + 144.
  assert h.parameter_count() == 7 * 4 + 16 * 20 + 4 * 144 + 144
  w = h()
  tiles = h.tiles(None).numpy()                  # [T, f, f, 16, 16]
  # Tile (r, c) of kernel a fills a[:, :, 16r:16r+16, 16c:16c+16] (times the gain).
  ga, gb = h._gains                              # pylint: disable=protected-access
  a = w["a/kernel"].numpy()
  for r in range(2):
    for c in range(3):
      np.testing.assert_allclose(a[:, :, 16 * r:16 * r + 16, 16 * c:16 * c + 16],
                                 tiles[r * 3 + c] * ga, rtol=1e-6)
  np.testing.assert_allclose(w["b/kernel"].numpy(), tiles[6][:, :, :1, :] * gb, rtol=1e-6)


# ----------------------------------------------------------------------------------------
# Shapes, conditions, batches of weight sets.
# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_condition_batch_equals_single_conditions(kind):
  target = small_target("float32")
  spec = functional.weight_spec(target, generated_patterns(kind))
  h = make_hnet(kind, spec, num_conditions=5, condition_dim=3)
  batch = h(tf.constant([4, 0, 2]))
  for i, cid in enumerate([4, 0, 2]):
    single = h(cid)
    for p, s in spec.items():
      assert single[p].shape == s.shape and batch[p].shape == (3,) + tuple(s.shape)
      np.testing.assert_allclose(batch[p][i].numpy(), single[p].numpy(), rtol=1e-5, atol=1e-6)
  # Given condition vectors: the table row for id 2 gives id 2's weights.
  vec = h(h.condition_embeddings[2])
  for p in spec:
    np.testing.assert_allclose(vec[p].numpy(), h(2)[p].numpy(), rtol=1e-6, atol=1e-7)
  # Different tasks get different weights.
  assert not np.allclose(batch[next(iter(spec))][0], batch[next(iter(spec))][1])


def test_chunked_condition_per_chunk_shifts_each_chunk_by_its_own_row():
  """condition_per_chunk: the condition is [C * k]; chunk c's generator input is
  [e_c ; row_c], checked against the generator applied by hand; a change of row c alone
  changes chunk c alone; ids, batches and vectors agree; the table is [N, C * k]."""
  from hypernet.hypernetworks.chunked import ChunkedHypernetwork  # pylint: disable=g-import-not-at-top
  spec = {"a/kernel": tf.TensorSpec((10, 7)), "a/bias": tf.TensorSpec((7,))}   # 77 scalars
  h = ChunkedHypernetwork(spec, chunk_size=20, chunk_emb_dim=3, hidden=(5,),
                          num_conditions=4, condition_dim=2, condition_per_chunk=True,
                          dtype="float64")
  assert h.num_chunks == 4 and h.condition_dim == 8
  assert tuple(h.condition_embeddings.shape) == (4, 8)
  row = h.condition_embeddings.numpy()[1]
  inputs = np.concatenate([h.embeddings.numpy(), row.reshape(4, 2)], 1)       # [C, 5]
  chunks = h.output_head(h.generator(tf.constant(inputs))).numpy().reshape(-1)[:77]
  flat = h.flat_weights(condition=tf.constant(row)).numpy()
  np.testing.assert_allclose(flat, chunks * h._gain.numpy() + h._mean.numpy(), rtol=1e-12)  # pylint: disable=protected-access
  changed = row.copy()
  changed[4:6] += 1.0                                           # chunk 2's row only
  delta = h.flat_weights(condition=tf.constant(changed)).numpy() - flat
  assert np.all(delta[:40] == 0) and np.all(delta[60:] == 0) and np.abs(delta[40:60]).max() > 0
  batch = h(tf.constant([1, 3]))
  for p in spec:
    np.testing.assert_allclose(batch[p][0].numpy(), h(1)[p].numpy(), rtol=1e-12)
    np.testing.assert_allclose(batch[p][1].numpy(), h(3)[p].numpy(), rtol=1e-12)
  with pytest.raises(ValueError, match="condition_per_chunk=True needs a condition"):
    ChunkedHypernetwork(spec, chunk_size=20, condition_per_chunk=True)


def test_chunked_generate_cuts_the_chunks_without_slicing_off_their_tail():
  """generate() equals flat_weights() cut by split, values and gradients bitwise, for one
  condition and a batch; its gradient graph has no StridedSliceGrad (the slice of the
  C * k chunk scalars to P scatters its gradient into a full-size zero vector)."""
  spec = {"a/kernel": tf.TensorSpec((10, 7), tf.float64), "a/bias": tf.TensorSpec((7,), tf.float64)}
  h = ChunkedHypernetwork(spec, chunk_size=20, chunk_emb_dim=3, hidden=(5,), num_conditions=3,
                          condition_dim=2, dtype="float64")
  assert h.num_chunks * h.chunk_size - h.num_generated == 3
  for condition in (tf.constant(1), tf.constant([0, 2])):
    with tf.GradientTape(persistent=True) as tape:
      got = h(condition)                                       # generate(), via Keras
      want = h.split(h.flat_weights(condition=h.condition_vectors(condition)))
      losses = [tf.add_n([tf.reduce_sum(tf.sin(w[p])) for p in spec]) for w in (got, want)]
    for p in spec:
      np.testing.assert_array_equal(got[p].numpy(), want[p].numpy())
    grads = [tape.gradient(loss, h.trainable_variables)
             for loss in losses]
    assert all(g is not None for g in grads[0])   # Embeddings, conditions, generator, head.
    for g1, g2 in zip(*grads):
      assert (g1 is None) == (g2 is None)
      if g1 is not None:
        np.testing.assert_array_equal(tf.convert_to_tensor(g1).numpy(),
                                      tf.convert_to_tensor(g2).numpy())

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      loss = tf.add_n([tf.reduce_sum(w) for w in h.generate(h.condition_vectors(1)).values()])
    return tape.gradient(loss, h.trainable_variables)
  ops = {op.type for op in step.get_concrete_function().graph.get_operations()}
  assert "SplitV" in ops and "StridedSliceGrad" not in ops, sorted(ops)


@pytest.mark.parametrize("kind", ["chunked", "mlp"])
def test_the_generators_activation_is_the_one_asked_for(kind):
  """activation="elu" (von Oswald et al. 2020's generator): the generated weights equal
  NumPy's ELU MLP through the same kernels, centred head and gain; the ReLU default
  differs from it; an unknown name is one ValueError naming the choices."""
  spec = {"a/kernel": tf.TensorSpec((10, 7), tf.float64), "a/bias": tf.TensorSpec((7,), tf.float64)}
  kw = (dict(chunk_size=20, chunk_emb_dim=3) if kind == "chunked" else dict(embedding_dim=3))
  cls = ChunkedHypernetwork if kind == "chunked" else MLPHypernetwork
  h = cls(spec, hidden=(5, 4), activation="elu", dtype="float64", seed=3, **kw)
  relu = cls(spec, hidden=(5, 4), dtype="float64", seed=3, **kw)
  elu = lambda z: np.where(z > 0, z, np.expm1(np.minimum(z, 0)))
  mlp = h.generator if kind == "chunked" else h.trunk
  x = h.embeddings.numpy() if kind == "chunked" else h.embedding.numpy()[None]
  for layer in mlp.layers:
    x = elu(x @ layer.kernel.numpy() + layer.bias.numpy())
  head = h.output_head if kind == "chunked" else h.head
  flat = (x @ head.kernel.numpy() + head.bias.numpy()).reshape(-1)[:77]
  ours = np.concatenate([h()[p].numpy().reshape(-1) for p in spec])
  np.testing.assert_allclose(ours, flat * h._gain.numpy() + h._mean.numpy(), rtol=1e-10)  # pylint: disable=protected-access
  other = np.concatenate([relu()[p].numpy().reshape(-1) for p in spec])
  assert not np.allclose(ours, other)
  with pytest.raises(ValueError, match=r"activation 'softplus' is unknown; choose one of"):
    cls(spec, hidden=(5,), activation="softplus", **kw)
  for name in base.ACTIVATIONS:                  # Each choice is a Keras activation here.
    assert keras.activations.get(name).__name__ == name


# ----------------------------------------------------------------------------------------
# Hyperfan init: generated variance equals the intended He / Glorot variance.
# ----------------------------------------------------------------------------------------

BIG_SPEC = {"conv_a/kernel": tf.TensorSpec((3, 3, 32, 64)),
            "conv_b/kernel": tf.TensorSpec((3, 3, 64, 32)),
            "dense/kernel": tf.TensorSpec((256, 96))}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["hyperfan_in", "hyperfan_out", "glorot"])
@pytest.mark.parametrize("conditional", [False, True])
def test_hyperfan_init_variance_matches_target_layer(kind, mode, conditional):
  spec = dict(BIG_SPEC)
  if kind == "static":
    spec.pop("dense/kernel")
  cond = dict(num_conditions=4, condition_dim=5) if conditional else {}
  sums = {p: 0.0 for p in spec}
  counts = {p: 0 for p in spec}
  for seed in range(3):
    kw = dict(chunk_size=512, hidden=(32,)) if kind == "chunked" else {}
    if kind == "static":
      kw = dict(z_dim=8)
    h = make_hnet(kind, spec, init=mode, seed=seed, **cond, **kw)
    w = h(tf.range(4)) if conditional else h()
    for p in spec:
      x = w[p].numpy()
      sums[p] += float(np.sum(x.astype(np.float64) ** 2))
      counts[p] += x.size
  for p, s in spec.items():
    intended = hinit.kernel_std(p, s.shape, mode) ** 2
    measured = sums[p] / counts[p]
    assert 0.8 < measured / intended < 1.2, (p, measured, intended)


def test_hyperfan_in_and_out_differ_as_fans_do():
  spec = {"d/kernel": tf.TensorSpec((400, 100))}
  v_in = np.var(MLPHypernetwork(spec, init="hyperfan_in")()["d/kernel"].numpy())
  v_out = np.var(MLPHypernetwork(spec, init="hyperfan_out")()["d/kernel"].numpy())
  np.testing.assert_allclose(v_in, 2 / 400, rtol=0.05)
  np.testing.assert_allclose(v_out, 2 / 100, rtol=0.05)


def test_non_kernel_tensors_start_at_target_mean():
  spec = {"bn/gamma": tf.TensorSpec((64,)), "bn/beta": tf.TensorSpec((64,))}
  values = {"bn/gamma": np.ones(64), "bn/beta": np.zeros(64)}
  for kind in ("mlp", "chunked"):
    w = make_hnet(kind, spec, values)()
    assert abs(float(np.mean(w["bn/gamma"])) - 1.0) < 0.05
    assert abs(float(np.mean(w["bn/beta"]))) < 0.05


@pytest.mark.parametrize("head_multiplier", [1.0, 4.0])
def test_pytorch_init_generates_the_raw_chunks_of_pytorch_default_layers(head_multiplier):
  # hypercl's init: every generator layer U(+-1/sqrt(fan_in)) for kernel and bias, the
  # weights the raw chunks; recomputed here in NumPy from the hypernetwork's variables.
  spec = {"a/kernel": tf.TensorSpec((30, 20), tf.float64),
          "a/bias": tf.TensorSpec((20,), tf.float64),
          "b/kernel": tf.TensorSpec((20, 7), tf.float64)}
  h = ChunkedHypernetwork(spec, chunk_size=100, chunk_emb_dim=8, hidden=(25, 12),
                          activation="elu", init="pytorch", num_conditions=3,
                          condition_dim=5, head_multiplier=head_multiplier, dtype="float64",
                          seed=3)
  layers = list(h.generator.layers) + [h.output_head]
  fan_ins = [13, 25, 12]
  for layer, fan_in in zip(layers, fan_ins):
    stored_bound = 1 / np.sqrt(fan_in) / (head_multiplier if layer is h.output_head else 1)
    for v in (layer.kernel.numpy(), layer.bias.numpy()):
      assert np.abs(v).max() <= stored_bound and np.abs(v).max() > 0.8 * stored_bound
  e = h.chunk_embeddings.numpy()
  np.testing.assert_allclose(np.std(e), 1.0, atol=0.2)
  cond = h.condition_embeddings.numpy()[2]
  x = np.concatenate([e, np.broadcast_to(cond, (len(e), 5))], 1)
  elu = lambda z: np.where(z > 0, z, np.expm1(np.minimum(z, 0)))
  for layer in h.generator.layers:
    x = elu(x @ layer.kernel.numpy() + layer.bias.numpy())
  flat = ((x @ h.output_head.kernel.numpy() + h.output_head.bias.numpy())
          * head_multiplier).reshape(-1)
  w = h(tf.constant([2]))
  got = np.concatenate([w[p].numpy()[0].reshape(-1) for p in h.paths])
  np.testing.assert_allclose(got, flat[:got.size], rtol=1e-12, atol=1e-14)


def test_pytorch_init_is_the_chunked_kinds_alone():
  with pytest.raises(ValueError, match="init='pytorch' is unknown"):
    MLPHypernetwork({"d/kernel": tf.TensorSpec((4, 3))}, init="pytorch")


# ----------------------------------------------------------------------------------------
# Gradients against float64 central finite differences.
# ----------------------------------------------------------------------------------------

def directional_fd_check(loss_fn, variables, eps=1e-6, seed=0, rtol=1e-6):
  """tape gradient . d == (L(v + eps d) - L(v - eps d)) / 2 eps for a random d per variable."""
  with tf.GradientTape() as tape:
    loss = loss_fn()
  grads = tape.gradient(loss, variables)
  rng = np.random.default_rng(seed)
  checked = 0
  for v, g in zip(variables, grads):
    assert g is not None, f"no gradient reaches {v.path}"
    g = tf.convert_to_tensor(g).numpy()
    d = rng.standard_normal(v.shape)
    orig = v.numpy()
    v.assign(orig + eps * d)
    lp = float(loss_fn())
    v.assign(orig - eps * d)
    lm = float(loss_fn())
    v.assign(orig)
    fd = (lp - lm) / (2 * eps)
    analytic = float(np.sum(g * d))
    assert abs(fd - analytic) <= rtol * max(1.0, abs(analytic)), (v.path, fd, analytic)
    checked += 1
  return checked


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("conditional", [False, True])
def test_gradients_match_float64_finite_differences(kind, conditional):
  target = small_target()
  spec = functional.weight_spec(target, generated_patterns(kind))
  values = {p: v.numpy() for p, v in functional.variable_paths(target).items() if p in spec}
  cond = dict(num_conditions=3, condition_dim=2) if conditional else {}
  h = make_hnet(kind, spec, values, dtype="float64", **cond)
  assert all(v.dtype == "float64" for v in h.trainable_variables)
  x = tf.constant(np.random.default_rng(1).standard_normal((5, 6, 6, 2)))
  y = tf.constant(np.random.default_rng(2).standard_normal((5, 3)))

  def loss():
    w = h(1) if conditional else h()
    return tf.reduce_sum((functional.functional_call(target, w, x) - y) ** 2)

  variables = list(h.trainable_variables)
  variables += [v for p, v in functional.variable_paths(target).items() if p not in spec]
  assert directional_fd_check(tf.function(loss), variables) == len(variables)


@pytest.mark.parametrize("kind", KINDS)
def test_batched_path_gradients_match_float64_finite_differences(kind):
  """Conditional hypernetwork -> S weight sets -> one batched target pass."""
  target = small_target()
  spec = functional.weight_spec(target, generated_patterns(kind))
  h = make_hnet(kind, spec, dtype="float64", num_conditions=3, condition_dim=2)
  rng = np.random.default_rng(3)
  x = tf.constant(rng.standard_normal((3, 4, 6, 6, 2)))   # [S, B, H, W, C]
  y = tf.constant(rng.standard_normal((3, 4, 3)))

  def loss():
    w = h(tf.constant([2, 0, 1]))
    return tf.reduce_sum((batched_functional_call(target, w, x) - y) ** 2)

  # Traced once: the variables are read when the function runs.
  n = directional_fd_check(tf.function(loss), list(h.trainable_variables))
  assert n == len(h.trainable_variables)


# ----------------------------------------------------------------------------------------
# Quantised generated weights: the gradient reaches the hypernetwork straight through.
# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("quantize", ["binary", "ternary", "int8"])
def test_quantized_weights_pass_gradient_to_hypernetwork(quantize):
  target = small_target("float32")
  spec = functional.weight_spec(target, "conv*/*,head/*")
  h = ChunkedHypernetwork(spec, chunk_size=64, chunk_emb_dim=8, hidden=(16,))
  source = sources.HypernetworkSource(target, h, quantize=quantize, quantize_targets="*kernel")
  assert source.quantized_paths == ["conv1/kernel", "conv2/kernel", "head/kernel"]
  x = tf.random.stateless_normal((5, 6, 6, 2), [0, 1])
  with tf.GradientTape(persistent=True) as tape:
    raw = h()
    qw = source.weights()
    loss = tf.reduce_sum(functional.functional_call(target, qw, x) ** 2)
  # The target ran on quantised values ...
  for p in source.quantized_paths:
    expected = ops.QUANTIZERS[quantize](raw[p]).numpy()
    np.testing.assert_array_equal(qw[p].numpy(), expected)
    assert len(np.unique(qw[p].numpy())) <= {"binary": 2, "ternary": 3, "int8": 256}[quantize]
  np.testing.assert_array_equal(qw["conv1/bias"].numpy(), raw["conv1/bias"].numpy())
  # ... and the hypernetwork gets J^T (dL/dW at the quantised W): straight through.
  grads = tape.gradient(loss, h.trainable_variables)
  dl_dw = tape.gradient(loss, qw)
  expected = tape.gradient(raw, h.trainable_variables,
                           output_gradients={p: dl_dw[p] for p in raw})
  for g, e in zip(grads, expected):
    assert float(tf.reduce_max(tf.abs(g))) > 0
    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-7)


def test_quantize_batched_weights_one_scale_per_set():
  spec = {"d/kernel": tf.TensorSpec((20, 10))}
  h = MLPHypernetwork(spec, num_conditions=3, condition_dim=4)
  target = keras.Sequential([keras.Input((20,)), keras.layers.Dense(10, name="d")])
  source = sources.HypernetworkSource(target, h, quantize="binary")
  raw, q = h(tf.range(3)), source.weights(tf.range(3))
  for s in range(3):
    alpha = np.mean(np.abs(raw["d/kernel"][s].numpy()))
    np.testing.assert_allclose(np.abs(q["d/kernel"][s].numpy()), alpha, rtol=1e-6)


def test_quantize_config_through_build_weight_source():
  config = load_config("digits_hyper")
  config.hypernet.quantize = "ternary"
  target = targets.make_target(config.model, (8, 8, 1), 10)
  source = sources.build_weight_source(config, target)
  w = source.weights()["conv2/kernel"].numpy()
  assert len(np.unique(w)) == 3
  config.hypernet.quantize = "int4"
  with pytest.raises(ValueError, match="quantize='int4'.*int8"):
    sources.build_weight_source(config, target)
  config.hypernet.quantize = "int8"
  config.hypernet.quantize_targets = "bn*/gamma"
  with pytest.raises(ValueError, match="quantize_targets pattern 'bn\\*/gamma' matches no"):
    sources.build_weight_source(config, target)


# ----------------------------------------------------------------------------------------
# Errors.
# ----------------------------------------------------------------------------------------

def test_condition_id_out_of_range_is_named():
  spec = {"d/kernel": tf.TensorSpec((4, 3))}
  h = ChunkedHypernetwork(spec, chunk_size=8, chunk_emb_dim=4, num_conditions=3, condition_dim=2)
  with pytest.raises(ValueError, match=r"condition id\(s\) \[3\] out of range.*\[0, 3\)"):
    h(3)
  with pytest.raises(ValueError, match=r"condition id\(s\) \[-1\] out of range"):
    h(tf.constant([0, -1]))
  fn = tf.function(lambda ids: h(ids)["d/kernel"])
  with pytest.raises(tf.errors.InvalidArgumentError, match="condition id out of range"):
    fn(tf.constant([1, 7]))
  np.testing.assert_allclose(fn(tf.constant([2]))[0].numpy(), h(2)["d/kernel"].numpy())


def test_condition_misuse_errors():
  spec = {"d/kernel": tf.TensorSpec((4, 3))}
  uncond = MLPHypernetwork(spec)
  with pytest.raises(ValueError, match="unconditional.*given a condition"):
    uncond(0)
  cond = MLPHypernetwork(spec, num_conditions=2, condition_dim=3)
  with pytest.raises(ValueError, match="is conditional: call it with a condition id"):
    cond()
  with pytest.raises(ValueError, match=r"shape \[3\] or \[S, 3\]"):
    cond(tf.ones([4]))
  with pytest.raises(ValueError, match="num_conditions=2 needs condition_dim > 0"):
    MLPHypernetwork(spec, num_conditions=2)


def test_static_rejects_non_conv_and_mixed_sizes():
  with pytest.raises(ValueError, match=r"square conv kernels.*'d/kernel' has shape \(4, 3\)"):
    StaticHypernetwork({"d/kernel": tf.TensorSpec((4, 3))})
  with pytest.raises(ValueError, match="'b/kernel' is 5x5"):
    StaticHypernetwork({"a/kernel": tf.TensorSpec((3, 3, 4, 4)),
                        "b/kernel": tf.TensorSpec((5, 5, 4, 4))})


def test_pattern_matching_nothing_and_unknown_kind_are_named():
  config = load_config("digits_mlp")
  target = targets.make_target(config.model, (8, 8, 1), 10)
  config.hypernet.targets = "conv*/kernel,lstm*/kernel"
  with pytest.raises(ValueError, match=r"Pattern 'lstm\*/kernel' matches no.*conv1/kernel"):
    sources.build_weight_source(config, target)
  config.hypernet.targets = "conv*/kernel"
  config.hypernet.kind = "gru"
  with pytest.raises(ValueError, match="kind='gru' is not a known hypernetwork kind.*'static'"):
    sources.build_weight_source(config, target)
  config.hypernet.kind = "mlp"
  config.hypernet.init = "lecun"
  with pytest.raises(ValueError, match=r"config\.hypernet \(kind 'mlp'\): init='lecun' is unknown"):
    sources.build_weight_source(config, target)


def test_parameter_counts_and_compression_ratio():
  spec = {"a/kernel": tf.TensorSpec((3, 3, 16, 16))}
  h = MLPHypernetwork(spec, embedding_dim=4, hidden=(8,))
  # embedding 4 + trunk 4*8+8 + head 8*2304+2304
  assert h.parameter_count() == 4 + 40 + 9 * 2304
  assert h.compression_ratio() == pytest.approx(2304 / (44 + 9 * 2304))
  assert isinstance(h, base.Hypernetwork)


# ----------------------------------------------------------------------------------------
# Every config builds its weight source (no data needed: shapes from the config).
# ----------------------------------------------------------------------------------------

CONFIGS = sorted(p.stem for p in (REPO_ROOT / "configs").glob("*.py") if p.stem != "__init__")
IMAGE_CONFIGS = [c for c in CONFIGS if "mobilenet" not in c and load_config(c).task in
                 ("classification", "multitask_classification")]


@pytest.mark.parametrize("name", IMAGE_CONFIGS)
def test_every_config_builds_its_weight_source(name):
  config = load_config(name)
  shape = (8, 8, 1) if config.data.name == "digits" else (28, 28, 1)
  target = targets.make_target(config.model, shape, 10)
  source = sources.build_weight_source(config, target)
  counts = source.parameter_counts()
  assert counts["target"] == sum(int(np.prod(v.shape)) for v in target.trainable_variables)
  if config.hypernet.kind == "none":
    assert counts["source"] == 0 and counts["trainable"] == counts["target"]
  else:
    assert counts["source"] > 0 and counts["generated"] > 0
    condition = tf.range(config.hypernet.num_conditions) if config.hypernet.num_conditions else None
    w = source.weights(condition)
    lead = (config.hypernet.num_conditions,) if condition is not None else ()
    for p, v in functional.variable_paths(target).items():
      if p in w:
        assert tuple(w[p].shape) == lead + tuple(v.shape)


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_round_trip_restores_every_parameter(kind, tmp_path):
  """tf.train.Checkpoint must see every variable (it misses Python lists of layers)."""
  target = small_target("float32")
  spec = functional.weight_spec(target, generated_patterns(kind))
  h = make_hnet(kind, spec, num_conditions=2, condition_dim=3)
  before = {p: w.numpy() for p, w in h(1).items()}
  path = tf.train.Checkpoint(hnet=h).save(str(tmp_path / "ckpt"))
  saved = {name for name, _ in tf.train.list_variables(path)}
  assert len([n for n in saved if n.startswith("hnet/")]) == len(h.trainable_variables)
  for v in h.trainable_variables:
    v.assign(v + 1.0)
  tf.train.Checkpoint(hnet=h).restore(path).assert_existing_objects_matched()
  for p, w in h(1).items():
    np.testing.assert_array_equal(w.numpy(), before[p])
