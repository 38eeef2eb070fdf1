"""Generated low-rank adapters (hypernet/hypernetworks/lora.py): the values against NumPy,
B = 0 at the start, the frozen base, gradients against float64 finite differences through
attention, hn.keras (fit, save / load), the config and the merged export."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import hypernet as hn
from hypernet.hypernetworks import lora

L = keras.layers
F64 = "float64"


def _attention_target(dtype="float32"):
  keras.utils.set_random_seed(0)
  inputs = keras.Input((5, 8), dtype=dtype)
  h = L.MultiHeadAttention(2, 4, name="mha", dtype=dtype)(inputs, inputs)
  h = L.LayerNormalization(name="ln", dtype=dtype)(h + inputs)
  h = L.Dense(16, activation="gelu", name="ff", dtype=dtype)(h)
  h = L.Dense(3, name="out", dtype=dtype)(L.GlobalAveragePooling1D(dtype=dtype)(h))
  return keras.Model(inputs, h)


def _lora(model, patterns="*kernel", **kwargs):
  spec = hn.weight_spec(model, patterns)
  values = {p: v.numpy() for p, v in hn.variable_paths(model).items() if p in spec}
  return lora.LoRAHypernetwork(spec, target_values=values, **kwargs), values


def _randomize_b(hnet, seed=1):
  """Gives B non-zero values (it starts at zero), so the adapters change the weights."""
  rng = np.random.default_rng(seed)
  if hnet.generator is None:
    for v in hnet.factor_b.values():
      v.assign(rng.normal(0, 0.3, v.shape))
  else:
    head = hnet.generator.head
    head.kernel.assign(rng.normal(0, 0.3, head.kernel.shape))
    head.bias.assign(rng.normal(0, 0.3, head.bias.shape))


def test_matrix_split_reads_each_layer_as_lora_does():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((6, 6, 2)), L.Conv2D(4, 3, name="conv"),
                            L.Reshape((16, 4)), L.Dense(5, name="dense")])
  roles = hn.weight_roles(model)
  assert lora.matrix_split((3, 3, 2, 4), roles["conv/kernel"]) == 3      # [18, 4]
  assert lora.matrix_split((4, 5), roles["dense/kernel"]) == 1
  target = _attention_target()
  roles = hn.weight_roles(target)
  q, o = hn.variable_paths(target)["mha/query/kernel"], hn.variable_paths(target)[
      "mha/attention_output/kernel"]
  assert lora.matrix_split(q.shape, roles["mha/query/kernel"]) == 1        # [d, h*k]
  assert lora.matrix_split(o.shape, roles["mha/attention_output/kernel"]) == 2  # [h*k, d]
  emb = keras.Sequential([keras.Input((3,), dtype="int32"), L.Embedding(11, 4, name="emb")])
  assert lora.matrix_split((11, 4), hn.weight_roles(emb)["emb/embeddings"]) == 1
  assert lora.matrix_split((7, 3, 5)) == 2                                 # no role
  with pytest.raises(ValueError, match="rank >= 2"):
    lora.matrix_split((7,))


def test_depthwise_kernel_is_read_as_taps_by_channels():
  # DepthwiseConv2D's kernel [kh, kw, in, mult] contracts only its kh * kw taps with the
  # input (fan-in K), so it is read as [K, in * mult]: a rank-r update mixes channels,
  # where all-but-last ([K * in, mult], mult = 1) would allow rank 1 at most.
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((6, 6, 5)),
                            L.DepthwiseConv2D(3, depth_multiplier=2, name="dw")])
  roles = hn.weight_roles(model)
  assert lora.matrix_split((3, 3, 5, 2), roles["dw/kernel"]) == 2          # [9, 10]
  hnet, values = _lora(model, "dw/kernel", generator="table", rank=3, scale=0.5)
  assert hnet.matrix_shapes == {"dw/kernel": (9, 10)}
  _randomize_b(hnet)
  a, b = (f.numpy() for f in hnet.factors()["dw/kernel"])
  want = values["dw/kernel"] + 0.5 * (a @ b).reshape(3, 3, 5, 2)
  np.testing.assert_allclose(hnet.generate(None)["dw/kernel"].numpy(), want, rtol=1e-6,
                             atol=1e-6)
  assert np.linalg.matrix_rank(0.5 * a @ b) == 3


@pytest.mark.parametrize("generator", ["mlp", "table"])
def test_starts_at_the_base_and_equals_numpy_w0_plus_scaled_ab(generator):
  model = _attention_target()
  hnet, values = _lora(model, rank=2, scale=0.5, generator=generator, num_conditions=3,
                       condition_dim=4)
  for p, w in hnet(1).items():            # B = 0: W' = W_0 exactly.
    np.testing.assert_array_equal(w.numpy(), values[p])
  _randomize_b(hnet)
  ids = tf.constant([0, 2])
  weights, factors = hnet(ids), hnet.factors(ids)
  for p, w in weights.items():
    a, b = (t.numpy().astype(np.float64) for t in factors[p])
    expected = values[p][None] + 0.5 * np.einsum("smr,srn->smn", a, b).reshape(w.shape)
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-5, atol=1e-6)
    m, n = hnet.matrix_shapes[p]
    assert a.shape == (2, m, 2) and b.shape == (2, 2, n)
  assert float(np.max(np.abs(weights["mha/query/kernel"][0] - weights["mha/query/kernel"][1]))) > 1e-3


def test_frozen_base_gets_no_gradient_and_train_base_stops_at_freeze():
  model = _attention_target()
  x = tf.constant(np.random.default_rng(0).normal(size=(4, 5, 8)), tf.float32)

  def base_grads(hnet):
    with tf.GradientTape() as tape:
      y = hn.functional_call(model, hnet(0), x)
      loss = tf.reduce_sum(y ** 2)
    grads = tape.gradient(loss, [hnet.base_weights[p] for p in hnet.paths])
    return [None if g is None else float(tf.reduce_max(tf.abs(g))) for g in grads]

  frozen, _ = _lora(model, rank=2, num_conditions=2, condition_dim=4)
  assert not any(v.trainable for v in frozen.base_weights.values())
  assert all(id(v) not in {id(t) for t in frozen.trainable_variables}
             for v in frozen.base_weights.values())
  trained, _ = _lora(model, rank=2, num_conditions=2, condition_dim=4, train_base=True)
  assert all(g and g > 0 for g in base_grads(trained))
  trained.freeze_base()
  assert all(g is None or g == 0 for g in base_grads(trained))


def test_a_frozen_base_stays_put_under_adam_momentum_in_fit():
  """freeze_base() mid-training: Adam's momentum keeps moving the trainable W_0, but the
  adapters use the copy frozen at that moment (the base in use moved by ~0.04 before)."""
  target = _attention_target()
  model = hn.HyperModel(target, "lora", targets="*kernel", train_rest=False,
                        hypernetwork_args=dict(rank=2, num_conditions=2, condition_dim=4,
                                               train_base=True))
  rng = np.random.default_rng(0)
  x, ids = rng.normal(size=(64, 5, 8)).astype("float32"), rng.integers(0, 2, 64)
  y = (x.mean((1, 2)) > 0).astype("int32")
  model.compile(keras.optimizers.Adam(1e-2),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit((x, ids), y, epochs=2, batch_size=16, verbose=0)
  model.hypernetwork.freeze_base()
  frozen = {p: w.numpy() for p, w in model.hypernetwork.base().items()}
  generated = model.generate(1)
  model.fit((x, ids), y, epochs=2, batch_size=16, verbose=0)
  for p, w in model.hypernetwork.base().items():
    np.testing.assert_array_equal(w.numpy(), frozen[p])
  assert max(float(np.abs(model.hypernetwork.base_weights[p].numpy() - frozen[p]).max())
             for p in frozen) > 1e-4          # Adam did move the unused trainable copy,
  assert max(float(np.abs(model.generate(1)[p] - generated[p]).max())
             for p in frozen) > 1e-4          # and the adapters still learn.


def test_gradients_through_attention_match_float64_finite_differences():
  keras.config.set_floatx(F64)
  try:
    model = _attention_target(F64)
    hnet, _ = _lora(model, rank=2, num_conditions=2, condition_dim=3, hidden=(5,),
                    embedding_dim=2, dtype=F64)
    _randomize_b(hnet)
  finally:
    keras.config.set_floatx("float32")
  x = tf.constant(np.random.default_rng(0).normal(size=(3, 5, 8)), tf.float64)

  def loss():
    return tf.reduce_sum(tf.sin(hn.functional_call(model, hnet(1), x)))

  variables = hnet.trainable_variables
  with tf.GradientTape() as tape:
    value = loss()
  grads = tape.gradient(value, variables)
  rng = np.random.default_rng(2)
  for v, g in zip(variables, grads):
    direction = rng.normal(size=v.shape)
    eps, v0 = 1e-6, v.numpy()
    v.assign(v0 + eps * direction)
    up = float(loss())
    v.assign(v0 - eps * direction)
    down = float(loss())
    v.assign(v0)
    numeric = (up - down) / (2 * eps)
    analytic = float(np.sum(tf.convert_to_tensor(g).numpy() * direction)) if g is not None else 0.0
    assert abs(analytic - numeric) <= 1e-6 * max(1.0, abs(numeric)), (v.name, analytic,
                                                                        numeric)


def test_rank_table_and_kernel_checks_name_the_fix():
  model = _attention_target()
  with pytest.raises(ValueError, match="rank must be an int >= 1"):
    _lora(model, rank=0)
  with pytest.raises(ValueError, match="generator='nope' is unknown"):
    _lora(model, generator="nope")
  with pytest.raises(ValueError, match="set num_conditions"):
    _lora(model, generator="table", condition_dim=4)
  with pytest.raises(ValueError, match="need kernels"):
    lora.LoRAHypernetwork.check_target_spec({"out/bias": (3,)})
  hnet, _ = _lora(model, generator="table", num_conditions=2)
  with pytest.raises(ValueError, match=r"out of range.*\[0, 2\)"):
    hnet(5)


def test_hypermodel_fits_saves_loads_and_merges(tmp_path):
  target = _attention_target()
  model = hn.HyperModel(target, "lora", targets="*kernel", train_rest=False,
                        hypernetwork_args=dict(rank=2, num_conditions=3, condition_dim=4,
                                               hidden=(8,)))
  counts = model.parameter_counts()
  assert counts["trainable"] == counts["hypernetwork"]   # Nothing of the base trains.
  rng = np.random.default_rng(0)
  x = rng.normal(size=(96, 5, 8)).astype("float32")
  task = rng.integers(0, 3, 96).astype("int32")
  y = ((x.mean((1, 2)) > 0).astype("int32") + task) % 3
  model.compile(optimizer=keras.optimizers.Adam(1e-2),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  before = model.evaluate((x, task), y, verbose=0)
  base = {p: v.numpy() for p, v in model.hypernetwork.base_weights.items()}
  model.fit((x, task), y, epochs=8, batch_size=32, verbose=0)
  assert model.evaluate((x, task), y, verbose=0) < before - 0.05
  for p, v in model.hypernetwork.base_weights.items():   # The base stayed frozen.
    np.testing.assert_array_equal(v.numpy(), base[p])
  path = str(tmp_path / "lora.keras")
  model.save(path)
  expected = model.predict((x[:8], task[:8]), verbose=0)
  # Loaded whole (the kind rebuilt from its config, then the base, the generator and the
  # task embeddings read back); tests/test_keras_state.py loads saved models in a new
  # process after `import hypernet` alone.
  loaded = keras.models.load_model(path)
  np.testing.assert_array_equal(loaded.predict((x[:8], task[:8]), verbose=0), expected)
  for p, v in loaded.hypernetwork.base_weights.items():
    np.testing.assert_array_equal(v.numpy(), base[p])
  # Merged into a plain Keras model for task 2: the same outputs without hypernet.
  merged = hn.merged_model(target, model.generate(2))
  np.testing.assert_allclose(merged.predict(x[:8], verbose=0),
                             model.predict((x[:8], np.full(8, 2, "int32")), verbose=0),
                             rtol=1e-5, atol=1e-5)
  assert not any(isinstance(l, hn.HyperModel) for l in merged.layers)


@pytest.mark.parametrize("generator", ["mlp", "table"])
def test_mixed_precision_adds_the_update_to_the_base_in_float32(generator):
  """Under mixed_bfloat16 the factors may be computed in bfloat16, but W_0 + A @ B is
  formed in float32: a small update added in bfloat16 rounds away against W_0 (relative
  error of the update above 1 before the fix)."""
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), L.Dense(16, name="d")])
    hnet, values = _lora(model, rank=2, generator=generator, num_conditions=2,
                         condition_dim=4)
    if generator == "table":
      hnet.factor_b["d/kernel"].assign(np.full((2, 2, 16), 1e-3))
    else:
      head = hnet.generator.head
      head.bias.assign(np.full(head.bias.shape, 1e-3))
    w = hnet(1)["d/kernel"]                       # through Keras' __call__ (autocast)
    a, b = hnet.factors(1)["d/kernel"]
  finally:
    keras.mixed_precision.set_global_policy("float32")
  assert w.dtype == tf.float32
  expected = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
  update = w.numpy() - values["d/kernel"]
  assert np.max(np.abs(update - expected)) < 1e-3 * np.max(np.abs(expected)), (
      np.max(np.abs(update - expected)), np.max(np.abs(expected)))


def test_task_ids_with_dict_inputs_match_each_task_alone():
  """A model whose input is a dict (token ids and a padding mask), adapters per task id:
  each example runs on its own task's weights, as the task's model alone does."""
  keras.utils.set_random_seed(0)
  tokens = keras.Input((6,), dtype="int32", name="tokens")
  mask = keras.Input((6,), dtype="int32", name="mask")
  h = L.Embedding(20, 8, name="embed")(tokens)
  pad = keras.ops.cast(mask[:, None, :], "bool")
  h = L.MultiHeadAttention(2, 4, name="mha")(h, h, attention_mask=pad)
  base = keras.Model({"tokens": tokens, "mask": mask},
                     L.Dense(2, name="head")(L.GlobalAveragePooling1D()(h)))
  model = hn.HyperModel(base, "lora", targets="mha/query/kernel,mha/value/kernel",
                        train_rest=False, hypernetwork_args=dict(rank=2, num_conditions=3,
                                                                 condition_dim=4))
  _randomize_b(model.hypernetwork)
  rng = np.random.default_rng(0)
  x = {"tokens": rng.integers(0, 20, (8, 6)).astype("int32"),
       "mask": (np.arange(6)[None] < rng.integers(2, 7, (8, 1))).astype("int32")}
  ids = rng.integers(0, 3, 8).astype("int32")
  got = model((x, ids)).numpy()
  for k in range(3):
    rows = ids == k
    alone = hn.functional_call(base, model.generate(k), {n: v[rows] for n, v in x.items()})
    np.testing.assert_allclose(got[rows], alone.numpy(), rtol=1e-5, atol=1e-5)
  assert np.abs(got - base(x).numpy()).max() > 1e-3   # The adapters act.
