"""Mixed precision as plain Keras does it (Micikevicius et al. 2018): under
``keras.mixed_precision.set_global_policy("mixed_float16" | "mixed_bfloat16")`` the
functional call, ``HyperModel`` and ``MetaModel`` compute in the low precision with float32
variables, the optimiser wrapped in Keras' ``LossScaleOptimizer`` exactly where Keras
wraps a plain model's (float16), and results within a stated tolerance of float32.
(The Trainer's ``config.dtype_policy``: ``tests/test_distribute.py``.)

Tolerances, relative to the float32 values (float16 has an 11-bit significand, bfloat16
an 8-bit one): outputs and losses 1e-2 / 4e-2, gradients (relative norm of the
difference) 2e-2 / 8e-2; meta-learning: the query accuracy after 40 meta-steps within 0.1
of float32's.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

import hypernet as hn
from hypernet.data import episodes
from hypernet.data.digits import load_digits
from hypernet.meta import conv4, meta_batch

TOL = {"mixed_float16": (1e-2, 2e-2), "mixed_bfloat16": (4e-2, 8e-2)}
LOW = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}


@pytest.fixture(params=["mixed_float16", "mixed_bfloat16"])
def policy(request):
  keras.mixed_precision.set_global_policy(request.param)
  yield request.param
  keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(scope="module")
def digits():
  d = load_digits()
  return d.x_train[:256].astype(np.float32) / 16, d.y_train[:256].astype(np.int32)


def _cnn(final_float32=True):
  layers = [keras.Input((8, 8, 1)), keras.layers.Conv2D(8, 3, name="conv"),
            keras.layers.BatchNormalization(name="bn"), keras.layers.ReLU(),
            keras.layers.Flatten(), keras.layers.Dense(10, name="head")]
  if final_float32:  # Keras' advice: the logits in float32.
    layers.append(keras.layers.Activation("linear", dtype="float32", name="logits"))
  return keras.Sequential(layers)


def _rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12)


def _in_float32(build):
  """``build()`` under the float32 policy (then the test's policy again)."""
  before = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_global_policy("float32")
  try:
    return build()
  finally:
    keras.mixed_precision.set_global_policy(before)


@pytest.fixture(scope="module")
def float32_reference():
  """``get(key, build)``: ``_in_float32(build)`` once per key for the module; the float32
  reference a test compares with is the same for both low-precision policies."""
  cache = {}

  def get(key, build):
    if key not in cache:
      cache[key] = _in_float32(build)
    return cache[key]
  return get


def test_functional_call_computes_in_the_low_precision(policy, digits):
  x = tf.constant(digits[0][:16])
  keras.utils.set_random_seed(1)
  model = _cnn(final_float32=False)
  reference = _in_float32(lambda: _cnn(final_float32=False))
  reference.set_weights(model.get_weights())
  assert all(v.dtype == "float32" for v in model.weights)
  given = {p: tf.identity(v.value) for p, v in hn.variable_paths(model).items()}
  assert all(g.dtype == tf.float32 for g in given.values())
  out = hn.functional_call(model, given, x)
  assert out.dtype == LOW[policy]  # Computed in the low precision, as model(x) is.
  np.testing.assert_array_equal(out.numpy(), model(x).numpy())
  want = reference(x)
  assert _rel(out, want) < TOL[policy][0]
  # Gradients reach the float32 weights in float32, close to float32's.
  trainable = hn.select_paths(model, "*")
  with tf.GradientTape() as tape:
    tape.watch([given[p] for p in trainable])
    loss = tf.reduce_sum(tf.cast(hn.functional_call(model, given, x), tf.float32) ** 2)
  grads = tape.gradient(loss, [given[p] for p in trainable])
  ref_given = {p: tf.identity(v.value) for p, v in hn.variable_paths(reference).items()}
  with tf.GradientTape() as tape:
    tape.watch([ref_given[p] for p in trainable])
    ref_loss = tf.reduce_sum(hn.functional_call(reference, ref_given, x) ** 2)
  ref_grads = tape.gradient(ref_loss, [ref_given[p] for p in trainable])
  for p, g, r in zip(trainable, grads, ref_grads):
    assert g.dtype == tf.float32, p
    assert _rel(g, r) < TOL[policy][1], (p, _rel(g, r))


def _fit(digits, build, epochs=2):
  keras.utils.set_random_seed(2)
  model = build()
  model.compile(keras.optimizers.Adam(1e-2),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  history = model.fit(digits[0], digits[1], batch_size=32, epochs=epochs, shuffle=False,
                      verbose=0)
  return model, history.history["loss"]


def _hyper():
  return hn.HyperModel(_cnn(), "chunked", hypernetwork_args=dict(
      chunk_size=64, chunk_emb_dim=4, hidden=(8,)))


def test_hypermodel_trains_as_a_plain_keras_model_does(policy, digits, float32_reference):
  model, losses = _fit(digits, _hyper)
  plain, _ = _fit(digits, _cnn, epochs=1)
  # Loss scaling exactly where Keras puts it for the plain model (float16 only).
  assert type(model.optimizer) is type(plain.optimizer)
  assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer) is (
      policy == "mixed_float16")
  assert all(v.dtype == "float32" for v in model.trainable_weights)
  assert model.target.layers[0].compute_dtype == LOW[policy]
  _, ref_losses = float32_reference("hypermodel", lambda: _fit(digits, _hyper))
  assert losses[-1] < losses[0]  # It learns.
  for got, want in zip(losses, ref_losses):
    assert abs(got - want) < TOL[policy][0] * max(1.0, want) * 5, (losses, ref_losses)


def test_meta_model_step_is_the_meta_gradient_in_the_low_precision(policy, digits,
                                                                   float32_reference):
  """One ``fit()`` step with SGD(1) is minus the meta-gradient that ``hn.meta`` computes
  under the same policy (through Keras' loss scaling for float16), and a few dozen
  meta-steps learn as float32's do. (A single meta-step is not compared with float32's:
  after adaptation a rounding-sized change flips ReLU / max-pool choices, and the
  meta-gradient of this small conv4 moved by 11-27% in both low precisions, against
  0.3-3.5% for a plain Keras gradient of the same network.)"""
  x, y = digits
  fn = episodes.make_episode_fn(episodes.class_indexed(x, y), num_ways=5, num_shots=1,
                                num_queries=3, seed=0)
  train = tf.data.Dataset.range(10 ** 6).map(fn).batch(4)
  batch = next(iter(train))

  def build():
    keras.utils.set_random_seed(3)
    return hn.MetaModel(conv4.make_conv4(5, (8, 8, 1), filters=8, num_blocks=2), "maml",
                        learner_args=dict(inner_lr=0.4, inner_steps=1))

  model = build()
  assert model.target.layers[0].compute_dtype == LOW[policy]
  variables = model.trainable_weights
  with tf.GradientTape() as tape:
    loss = meta_batch.meta_batch_loss(model.learner, batch, before_metrics=False).loss
  grads = tape.gradient(loss, variables)
  before = [np.array(v.numpy()) for v in variables]
  sgd = keras.optimizers.SGD(1.0)
  model.compile(optimizer=keras.optimizers.LossScaleOptimizer(sgd, initial_scale=16.0)
                if policy == "mixed_float16" else sgd)
  history = model.fit(tf.data.Dataset.from_tensors(batch), epochs=1, verbose=0)
  assert abs(history.history["loss"][0] - float(loss)) < 1e-3 * float(loss)
  step = np.concatenate([(v.numpy() - b).ravel() for v, b in zip(variables, before)])
  # The compiled step against the eager gradient: the same ops, rounded apart (bfloat16's
  # kernels differ between the two; measured 3.4e-2, float16 below 1e-2).
  assert _rel(step, -np.concatenate([g.numpy().ravel() for g in grads])) < TOL[policy][1]
  # Keras wraps a compiled optimiser in loss scaling exactly where it would for a plain
  # model, and a few dozen meta-steps learn as float32's do.
  test = list(tf.data.Dataset.range(10 ** 6).map(
      episodes.make_episode_fn(episodes.class_indexed(x, y), num_ways=5, num_shots=1,
                               num_queries=3, seed=9)).batch(4).take(5))

  def trained():
    model = build()
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    model.fit(train, steps_per_epoch=40, epochs=1, verbose=0)
    scores = model.evaluate(tf.data.Dataset.from_tensor_slices(
        {k: tf.concat([b[k] for b in test], 0) for k in test[0]}).batch(4), verbose=0,
                            return_dict=True)
    return model, scores

  model, scores = trained()
  assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer) is (
      policy == "mixed_float16")
  _, ref = float32_reference("meta_model", trained)
  assert scores["accuracy"] > scores["accuracy_before"] + 0.1  # Adaptation learned.
  assert abs(scores["accuracy"] - ref["accuracy"]) < 0.1, (scores, ref)


def test_keras_models_warn_where_bfloat16_conv_gradients_are_wrong(monkeypatch):
  """Where TensorFlow's bfloat16 convolution kernel gradient is wrong (CPUs without
  AVX-512; the probe's answer set here, on every machine), a HyperModel or MetaModel
  whose target convolves in bfloat16 says so in one warning naming the layer; with a
  right gradient, or in float32, it is silent."""
  from hypernet.numerics import devices  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(devices, "_BF16_CONV_PROBE", {"cpu": "the kernel sums 1,024 ones to 512"})
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    cnn, conv4_net = _cnn(), conv4.make_conv4(5, (8, 8, 1), filters=4, num_blocks=1)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  with pytest.warns(UserWarning, match=r"^HyperModel\(target=\.\.\.\): convolution 'conv' "
                    r"computes in bfloat16, and the kernel sums 1,024 ones to 512: its kernel "
                    r"gradients will be wrong; train it in float32 here\.$"):
    hn.HyperModel(cnn, "chunked", hypernetwork_args=dict(chunk_size=64))
  with pytest.warns(UserWarning, match=r"^MetaModel\(target=\.\.\.\): convolution"):
    hn.MetaModel(conv4_net, "protonet")
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    hn.MetaModel(conv4.make_conv4(5, (8, 8, 1), filters=4, num_blocks=1), "protonet")
    monkeypatch.setattr(devices, "_BF16_CONV_PROBE", {"cpu": None})
    hn.MetaModel(conv4_net, "protonet")
