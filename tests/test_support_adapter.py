"""Adapters from a support set (hypernet/meta/support_adapter.py): CNAPs-style generated
LoRA on the body, Prototypical Networks' head from the adapted body.

Exact checks in float64: at initialisation (``B = 0``) the learner is Prototypical
Networks on the same body (fast weights, the target's logits, Eq. 2's logits and the
meta-gradient of the body); with the generator's weights made non-zero, the logits
against a NumPy computation of the whole chain (body at the base, prototypes, task
embedding and projection, the generator MLP, ``W_0 + s A @ B``, the adapted body, the
distances); the meta-gradient of every variable (generator, projection, body) against
central finite differences, by a tape and by the trainer's accumulation loop; the task
embedding's invariance to the support set's order and labels. Then the paths a user
takes: the config (the Trainer on digits episodes, a frozen base, a checkpoint round
trip; the committed Omniglot config for two steps), a small Keras transformer with
adapters on the attention projections (directly and through ``hn.keras.MetaModel``), and
``MetaModel`` on conv4 saving and loading the generator; bad arguments in one line.
"""
import importlib.util
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import hypernet as hn
from hypernet import config_lib
from hypernet.core import functional
from hypernet.data import episodes
from hypernet.data.digits import load_digits
from hypernet.keras import MetaModel
from hypernet.meta import conv4, meta_batch, protonet, support_adapter
from hypernet.training import export, loop
from tests.test_meta import central_fd, mean_query_loss

LOSS = "sparse_softmax_cross_entropy"
F64 = "float64"
L = keras.layers
CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"
SUBSET = "images_background_small1.zip,images_background_small2.zip"
BN_EPSILON = 1e-3   # Keras' BatchNormalization default.


def small_net(head_units=5):
  """float64: Dense(5, tanh) "d1" -> Dense(4) "d2" -> BatchNorm -> tanh -> Dense head."""
  keras.utils.set_random_seed(1)
  return keras.Sequential([
      keras.Input((3,), dtype=F64),
      L.Dense(5, activation="tanh", name="d1", dtype=F64),
      L.Dense(4, name="d2", dtype=F64),
      L.BatchNormalization(name="bn", dtype=F64),
      L.Activation("tanh", name="tanh", dtype=F64),
      L.Dense(head_units, name="head", dtype=F64)], name="net")


def _task(seed, ways=3, shots=2, queries=2, dim=3):
  rng = np.random.default_rng(seed)
  sy = np.tile(np.arange(ways), shots)
  qy = np.repeat(np.arange(ways), queries)
  return (tf.constant(rng.normal(size=(ways * shots, dim))), tf.constant(sy),
          tf.constant(rng.normal(size=(ways * queries, dim))), tf.constant(qy))


def _learner(model, **kwargs):
  args = dict(rank=2, adapter_scale=0.7, generator_widths=(3,), task_dim=4, seed=3)
  args.update(kwargs)
  return support_adapter.SupportAdapter(model, LOSS, **args)


def _perturb_generator(learner, seed=0, std=1.0):
  """Every generator weight random (its output layer starts with B's columns at zero),
  the hidden ReLUs' biases positive (each unit active for some tasks at least)."""
  rng = np.random.default_rng(seed)
  gen = learner.hypernetwork.generator
  hidden_biases = {id(layer.bias) for layer in gen.trunk.layers}
  for v in learner.hypernetwork.trainable_variables:
    value = rng.normal(scale=std, size=v.shape)
    v.assign(np.abs(value) + 0.1 if id(v) in hidden_biases else value)


def _batch(tasks):
  return {k: tf.stack([t[i] for t in tasks]) for i, k in enumerate(meta_batch.BATCH_KEYS)}


# -- NumPy: the whole chain ---------------------------------------------------------------
def _np_body(w, x):
  h = np.tanh(x @ w["d1/kernel"] + w["d1/bias"])
  h = h @ w["d2/kernel"] + w["d2/bias"]
  h = (h - h.mean(0)) / np.sqrt(h.var(0) + BN_EPSILON) * w["bn/gamma"] + w["bn/beta"]
  return np.tanh(h)


def _np_prototypes(f, y, ways):
  return np.stack([f[y == c].mean(0) for c in range(ways)])


def _np_factors(learner, condition):
  """``{path: (A, B)}`` of the LoRA generator's MLP (ReLU trunk, linear output layer
  scaled by its per-tensor gain and shifted by its mean), from its variables."""
  gen = learner.hypernetwork.generator
  h = condition[None]
  for layer in gen.trunk.layers:
    h = np.maximum(h @ layer.kernel.numpy() + layer.bias.numpy(), 0.0)
  flat = (h @ gen.head.kernel.numpy() + gen.head.bias.numpy())[0]
  flat = flat * gen._gain.numpy() + gen._mean.numpy()  # pylint: disable=protected-access
  out = {}
  for p, (m, n) in learner.hypernetwork.matrix_shapes.items():
    a = flat[gen.head_columns(p + "/lora_a")].reshape(m, learner.rank)
    b = flat[gen.head_columns(p + "/lora_b")].reshape(learner.rank, n)
    out[p] = (a, b)
  return out


def _np_support_adapter(learner, model, sx, sy, qx, ways):
  """(embedding, adapted weights, prototypes, Eq. 2 logits, ||f_q||^2) in NumPy."""
  w = {p: v.numpy() for p, v in functional.variable_paths(model).items()}
  f0 = _np_body(w, sx)
  embedding = _np_prototypes(f0, sy, ways).mean(0)
  condition = embedding @ learner.projection.numpy()
  adapted = dict(w)
  for p, (a, b) in _np_factors(learner, condition).items():
    adapted[p] = w[p] + learner.adapter_scale * (a @ b).reshape(w[p].shape)
  protos = _np_prototypes(_np_body(adapted, sx), sy, ways)
  f_q = _np_body(adapted, qx)
  logits = -((f_q[:, None, :] - protos[None]) ** 2).sum(-1)
  return condition, adapted, protos, logits, (f_q ** 2).sum(-1, keepdims=True)


# -- at initialisation: Prototypical Networks ---------------------------------------------
@pytest.mark.parametrize("target", ["mlp", "conv4"])
def test_at_initialisation_it_is_prototypical_networks(target):
  """B = 0: the adapted kernels are W_0 exactly, the target's logits and Eq. 2's logits
  equal ProtoNet's, and so does the meta-gradient of the body; B's generator columns get
  a gradient (learning starts), A's none."""
  if target == "mlp":
    model, tasks = small_net(), [_task(0), _task(1)]
  else:
    keras.utils.set_random_seed(2)
    model = conv4.make_conv4(5, (8, 8, 1), filters=4, num_blocks=2, dtype=F64)
    rng = np.random.default_rng(0)
    tasks = [(tf.constant(rng.random((6, 8, 8, 1))), tf.constant(np.tile(np.arange(3), 2)),
              tf.constant(rng.random((6, 8, 8, 1))), tf.constant(np.repeat(np.arange(3), 2)))
             for _ in range(2)]
  learner = _learner(model, adapt="d*/kernel" if target == "mlp" else "conv*/kernel")
  proto = protonet.PrototypicalNetwork(model, LOSS)
  assert learner.untrained_paths == proto.untrained_paths == ["head/kernel", "head/bias"]
  for sx, sy, qx, _ in tasks:
    fast, state = learner.adapt(sx, sy)
    ref, ref_state = proto.adapt(sx, sy)
    variables = functional.variable_paths(model)
    for p in learner.adapter_paths:
      np.testing.assert_array_equal(fast[p].numpy(), variables[p].numpy())
    out = functional.functional_call(model, fast, qx, training=True, state=state)
    want = functional.functional_call(model, ref, qx, training=True, state=ref_state)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(learner.distance_logits(sx, sy, qx).numpy(),
                               proto.distance_logits(sx, sy, qx).numpy(), rtol=1e-13,
                               atol=1e-13)
  body = [v for p, v in functional.variable_paths(model, trainable=True).items()
          if not p.startswith("head/")]
  batch = _batch(tasks)
  generator = learner.hypernetwork.generator
  with tf.GradientTape(persistent=True) as tape:
    mine = meta_batch.meta_batch_loss(learner, batch, before_metrics=False).loss
    theirs = meta_batch.meta_batch_loss(proto, batch, before_metrics=False).loss
  assert float(mine) == pytest.approx(float(theirs), rel=1e-13)
  for v, a, b in zip(body, tape.gradient(mine, body), tape.gradient(theirs, body)):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-13, err_msg=v.path)
  head_grad = tape.gradient(mine, generator.head.kernel).numpy()
  for p in learner.adapter_paths:
    assert np.abs(head_grad[:, generator.head_columns(p + "/lora_b")]).max() > 1e-6, p
    assert np.all(head_grad[:, generator.head_columns(p + "/lora_a")] == 0), p


# -- with a non-zero generator: NumPy, finite differences, invariance ---------------------
def test_logits_equal_a_numpy_computation_of_the_whole_chain():
  """A 3-way episode on a 5-output head, the generator random: the task embedding, the
  adapted kernels, the head (2 q_c, -||q_c||^2; absent classes masked), the target's
  logits (Eq. 2 + ||f(x)||^2), distance_logits and the meta-batch loss are NumPy's."""
  model = small_net(head_units=5)
  learner = _learner(model)
  _perturb_generator(learner)
  assert learner.adapter_paths == ["d1/kernel", "d2/kernel"]   # adapt=None: body kernels
  losses = []
  tasks = [_task(0), _task(1)]
  for sx, sy, qx, qy in tasks:
    cond, adapted, protos, logits, norms = _np_support_adapter(
        learner, model, sx.numpy(), sy.numpy(), qx.numpy(), 3)
    np.testing.assert_allclose(learner.task_embedding(sx, sy).numpy(), cond, rtol=1e-12,
                               atol=1e-14)
    fast, state = learner.adapt(sx, sy)
    for p in learner.adapter_paths:
      assert np.abs(adapted[p] - model.get_layer(p.split("/")[0]).kernel.numpy()).max() > 1e-2
      np.testing.assert_allclose(fast[p].numpy(), adapted[p], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fast["head/kernel"].numpy()[:, :3], 2 * protos.T, rtol=1e-11)
    np.testing.assert_allclose(fast["head/bias"].numpy()[:3], -(protos ** 2).sum(-1),
                               rtol=1e-11)
    assert np.all(fast["head/bias"].numpy()[3:] == 0.5 * np.finfo(np.float64).min)
    out = functional.functional_call(model, fast, qx, training=True, state=state).numpy()
    np.testing.assert_allclose(out[:, :3], logits + norms, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(learner.distance_logits(sx, sy, qx).numpy(), logits,
                               rtol=1e-11, atol=1e-12)
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    losses.append(-log_probs[np.arange(len(qy)), qy.numpy()].mean())
  result = meta_batch.meta_batch_loss(learner, _batch(tasks), before_metrics=False)
  assert float(result.loss) == pytest.approx(np.mean(losses), rel=1e-11)


def test_meta_gradient_matches_float64_finite_differences():
  """Every variable the outer loop trains (the generator's MLP, the projection, the body;
  not the head) against central differences of the mean query loss of two tasks, by a
  tape and by the trainer's per-task accumulation loop."""
  model = small_net(head_units=4)
  learner = _learner(model)
  _perturb_generator(learner, seed=1)
  tasks = [_task(2), _task(4)]
  body = [v for p, v in functional.variable_paths(model, trainable=True).items()
          if not p.startswith("head/")]
  variables = list(learner.trainable_variables) + body
  assert len(learner.trainable_variables) == 5   # projection, trunk kernel/bias, output

  @tf.function
  def loss():
    return mean_query_loss(learner, model, tasks)

  fd = central_fd(loss, variables)
  with tf.GradientTape() as tape:
    value = loss()
  grads = tape.gradient(value, variables)
  accumulated = meta_batch.meta_batch_gradients(learner, _batch(tasks), variables)
  assert float(accumulated.loss) == pytest.approx(float(value), rel=1e-12)
  for v, g, a, n in zip(variables, grads, accumulated.variable_grads, fd):
    name = getattr(v, "path", v.name)
    if not name.endswith("d2/bias"):   # A bias before BatchNorm: no gradient at all.
      assert np.abs(n).max() > 1e-6, name
    np.testing.assert_allclose(g.numpy(), n, rtol=1e-6, atol=1e-9, err_msg=name)
    np.testing.assert_allclose(a.numpy(), n, rtol=1e-6, atol=1e-9, err_msg=name)
  head = [model.get_layer("head").kernel, model.get_layer("head").bias]
  with tf.GradientTape() as tape:
    value = loss()
  assert tape.gradient(value, head) == [None, None]


def test_the_task_embedding_ignores_the_support_order_and_the_labels():
  """A permuted support set gives the same embedding and the same logits; relabelled
  classes give the same embedding and the logits' columns relabelled."""
  model = small_net(head_units=4)
  learner = _learner(model)
  _perturb_generator(learner, seed=2)
  sx, sy, qx, _ = _task(5, ways=4, shots=3)
  order = np.random.default_rng(0).permutation(len(sy))
  relabel = np.array([2, 0, 3, 1])
  embedding = learner.task_embedding(sx, sy).numpy()
  logits = learner.distance_logits(sx, sy, qx).numpy()
  shuffled = (tf.gather(sx, order), tf.gather(sy, order))
  np.testing.assert_allclose(learner.task_embedding(*shuffled).numpy(), embedding,
                             rtol=1e-13, atol=1e-15)
  np.testing.assert_allclose(learner.distance_logits(*shuffled, qx).numpy(), logits,
                             rtol=1e-12, atol=1e-13)
  renamed = tf.constant(relabel[sy.numpy()])
  np.testing.assert_allclose(learner.task_embedding(sx, renamed).numpy(), embedding,
                             rtol=1e-13, atol=1e-15)
  np.testing.assert_allclose(learner.distance_logits(sx, renamed, qx).numpy()[:, relabel],
                             logits, rtol=1e-12, atol=1e-13)
  # Without a projection the embedding is the mean prototype [D] itself.
  plain = _learner(model, task_dim=0)
  assert plain.projection is None and plain.task_embedding(sx, sy).shape == (4,)


def test_bad_arguments_are_named_in_one_line():
  model = small_net()
  cases = [
      (dict(rank=0), r"^rank must be an int >= 1, got 0\.$"),
      (dict(adapter_scale=0.0), r"^adapter_scale must be a finite float != 0"),
      (dict(adapter_scale="1"), r"^adapter_scale must be a finite float != 0"),
      (dict(generator_widths=(0,)), r"^generator_widths must be ints >= 1, got \(0,\)\.$"),
      (dict(task_dim=-1), r"^task_dim must be an int >= 0, got -1\.$"),
      (dict(adapt="head/*"), r"^adapt='head/\*' selects the head's \['head/kernel', "
                             r"'head/bias'\], which is written per task"),
      (dict(adapt="d1/*"), r"^adapt='d1/\*' selects \['d1/bias'\], which are not kernels "
                           r"\(rank >= 2\)"),
      (dict(adapt="nothing/*"), r"^adapt='nothing/\*': Pattern 'nothing/\*' matches no "
                                r"trainable weight"),
      (dict(head="d2/kernel"), r"must be one Dense layer"),
  ]
  for kwargs, match in cases:
    with pytest.raises(ValueError, match=match) as e:
      _learner(model, **kwargs)
    assert "\n" not in str(e.value), kwargs
  no_kernel = keras.Sequential([keras.Input((3,), dtype=F64),
                                L.BatchNormalization(name="bn", dtype=F64),
                                L.Dense(3, name="head", dtype=F64)])
  with pytest.raises(ValueError, match=r"^adapt=None: the body of model .* has no kernel"):
    _learner(no_kernel)


def random_5way_batch():
  """A meta-batch of 2 random 5-way 1-shot tasks of 8x8x1 inputs (2 queries a class)."""
  rng = np.random.default_rng(0)
  return {"support_x": rng.random((2, 5, 8, 8, 1), "float32"),
          "support_y": np.tile(np.arange(5), (2, 1)),
          "query_x": rng.random((2, 10, 8, 8, 1), "float32"),
          "query_y": np.tile(np.repeat(np.arange(5), 2), (2, 1))}


def test_under_a_mixed_policy_the_head_and_adapters_are_float32():
  """mixed_bfloat16: the body's features come in bfloat16; the prototypes, the head and
  the adapted kernels are float32 (the variables' dtype), the loss at B = 0 is
  ProtoNet's, and the generator gets finite gradients."""
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    keras.utils.set_random_seed(5)
    model = conv4.make_conv4(5, (8, 8, 1), filters=4, num_blocks=2)
    learner = support_adapter.SupportAdapter(model, LOSS, rank=2, generator_widths=(4,),
                                             task_dim=3)
    proto = protonet.PrototypicalNetwork(model, LOSS)
    batch = random_5way_batch()
    fast, _ = learner.adapt(batch["support_x"][0], batch["support_y"][0])
    assert {fast[p].dtype for p in learner.adapter_paths + learner.generated_paths} == {
        tf.float32}
    with tf.GradientTape() as tape:
      mine = meta_batch.meta_batch_loss(learner, batch, before_metrics=False).loss
    theirs = meta_batch.meta_batch_loss(proto, batch, before_metrics=False).loss
    assert float(mine) == pytest.approx(float(theirs), rel=1e-6)
    grads = tape.gradient(mine, learner.trainable_variables)
    assert all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads)
  finally:
    keras.mixed_precision.set_global_policy("float32")


# -- the config and the command line ------------------------------------------------------
def _digits_config(**meta):
  c = config_lib.base_config()
  c.task, c.data.name = "few_shot", "digits"
  c.model.name, c.model.conv_widths = "conv4", (8, 8)
  c.meta.learner, c.meta.eval_inner_steps = "support_adapter", 0
  fields = dict(adapt="conv*/kernel", rank=2, generator_widths=(8,))
  fields.update(meta)
  c.meta.update(fields)
  c.meta.num_queries, c.meta.eval_queries, c.meta.eval_episodes = 2, 2, 10
  c.batch_size, c.eval_batch_size = 2, 10
  c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 3, 3, 0, 3
  c.optim.lr, c.optim.schedule, c.jit_compile = 1e-2, "constant", "false"
  return c


def _values(variables):
  return [np.array(v.numpy()) for v in variables]


def test_trains_from_the_config_in_the_trainer_and_restores(tmp_path):
  """config.meta.learner='support_adapter' on 5-way 1-shot digits episodes: the
  Trainer trains the body and the generator (B leaves zero), never the head, and a
  checkpoint brings the generator back."""
  c = _digits_config()
  config_lib.validate(c)
  assert {"meta.rank", "meta.adapter_scale", "meta.task_dim", "meta.train_base",
          "meta.generator_widths", "meta.adapt"} <= set(config_lib.used_fields(c))
  trainer = loop.Trainer(c, str(tmp_path))
  learner = trainer.task.learner
  assert isinstance(learner, support_adapter.SupportAdapter)
  assert learner.adapter_paths == ["conv1/kernel", "conv2/kernel"]
  generator = learner.hypernetwork.trainable_variables
  trained = {id(v) for v in trainer.task.trainable_variables}
  assert {id(v) for v in generator} <= trained
  target = functional.variable_paths(trainer.task.target)
  assert id(target["head/kernel"]) not in trained and id(target["conv1/kernel"]) in trained
  before_gen, before_body = _values(generator), target["conv1/kernel"].numpy().copy()
  head = target["head/kernel"].numpy().copy()
  metrics, bad = trainer.train_chunk(trainer.train_iterator(0), 3)
  assert bad == -1 and np.isfinite(float(metrics["loss"]))
  assert max(np.abs(a - b.numpy()).max() for a, b in zip(before_gen, generator)) > 0
  assert np.abs(target["conv1/kernel"].numpy() - before_body).max() > 0
  np.testing.assert_array_equal(target["head/kernel"].numpy(), head)
  b_cols = learner.hypernetwork.generator.head_columns("conv2/kernel/lora_b")
  assert np.abs(learner.hypernetwork.generator.head.kernel.numpy()[:, b_cols]).max() > 0
  result = trainer.evaluate()
  assert 0.0 <= result["accuracy"] <= 1.0 and not [k for k in result if "_before" in k]
  trainer.step.assign(3)
  trainer.manager.save(checkpoint_number=3)
  restored = loop.Trainer(c, str(tmp_path))
  assert restored.restore() == 3
  for a, b in zip(restored.task.learner.hypernetwork.trainable_variables, generator):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_frozen_base_trains_the_generator_alone(tmp_path):
  """config.meta.train_base=False: the body's weights are left as they are (not among the
  trained variables, no gradient), the generator learns."""
  c = _digits_config(train_base=False)
  config_lib.validate(c)
  trainer = loop.Trainer(c, str(tmp_path))
  learner = trainer.task.learner
  target = functional.variable_paths(trainer.task.target, trainable=True)
  body = [p for p in target if not p.startswith("head/")]
  assert sorted(learner.untrained_paths) == sorted(["head/kernel", "head/bias"] + body)
  trained = {id(v) for v in trainer.task.trainable_variables}
  assert not {id(target[p]) for p in target} & trained
  before = {p: v.numpy().copy() for p, v in target.items()}
  generator = learner.hypernetwork.trainable_variables
  before_gen = _values(generator)
  trainer.train_chunk(trainer.train_iterator(0), 3)
  for p, v in target.items():
    np.testing.assert_array_equal(v.numpy(), before[p], err_msg=p)
  assert max(np.abs(a - b.numpy()).max() for a, b in zip(before_gen, generator)) > 0


def _config(name):
  spec = importlib.util.spec_from_file_location(name, CONFIGS / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def test_the_config_is_protonets_with_adapters():
  """The committed config differs from omniglot_standard_protonet only in the learner
  and its fields; it is refused --export (no single target); another learner's field is
  refused in one line."""
  mine, theirs = _config("omniglot_standard_support_adapter"), _config(
      "omniglot_standard_protonet")
  config_lib.validate(mine)
  for group in ("data", "model", "optim"):
    assert mine[group] == theirs[group], group
  assert mine.num_steps == theirs.num_steps and mine.batch_size == theirs.batch_size
  own = set(config_lib.LEARNERS.declared()["support_adapter"])
  differ = {k for k in mine.meta if mine.meta[k] != theirs.meta[k]}
  assert differ <= own | {"learner"}, differ
  assert not export.exportable(mine)   # The head (and body) are written per task.
  with pytest.raises(export.NotExportableError,
                     match=r"^--export: config\.meta\.learner='support_adapter' generates"):
    export.check_exportable(mine)
  mine.meta.inner_lr = 0.1
  with pytest.raises(config_lib.ConfigError,
                     match=r"^config\.meta\.inner_lr=0\.1 is not read by learner "
                           r"'support_adapter' \(its fields: .*\); set it back to 0\.4\.$"):
    config_lib.validate(mine)


@pytest.mark.slow   # Tens of seconds on 2 loaded cores, most of it tracing the meta-step.
@pytest.mark.parametrize("name", ["omniglot_standard_support_adapter"])
def test_committed_config_runs_on_omniglot(name, data_dir, tmp_path):
  """The config as committed on the two small Omniglot zips, 2 meta-steps (40-way
  episodes) through train_and_evaluate (what python -m hypernet.train runs), evaluated
  5-way on held-out characters."""
  c = _config(name)
  config_lib.validate(c)
  c.data.data_dir = str(data_dir / "omniglot")
  c.data.omniglot_zips, c.data.num_test_characters = SUBSET, 50
  c.meta.eval_episodes, c.meta.eval_queries, c.eval_batch_size = 10, 5, 10
  c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 2, 1, 0, 2
  result = loop.train_and_evaluate(c, str(tmp_path))
  assert 0.2 < result["accuracy"] <= 1.0 and np.isfinite(result["loss"])
  assert not [k for k in result if "_before" in k], sorted(result)


# -- a Keras transformer, and hn.keras.MetaModel ------------------------------------------
VOCAB, SEQ, DIM, HEADS, WAYS = 11, 5, 8, 2, 3


def tiny_transformer():
  """float64 ``{"ids": [B, SEQ] int32, "mask": [B, SEQ] bool}`` -> ``[B, WAYS]``: token
  and position embeddings, one pre-LN block (padding-masked self-attention, a ReLU
  feed-forward), mean over positions, a Dense head; the body and the head as two models
  sharing its layers."""
  keras.utils.set_random_seed(4)
  ids = keras.Input((SEQ,), dtype="int32", name="ids")
  mask = keras.Input((SEQ,), dtype="bool", name="mask")
  positions = keras.ops.cumsum(keras.ops.ones_like(ids), axis=1) - 1
  h = (L.Embedding(VOCAB, DIM, dtype=F64, name="tokens")(ids)
       + L.Embedding(SEQ, DIM, dtype=F64, name="positions")(positions))
  a = L.LayerNormalization(dtype=F64, name="ln")(h)
  h = h + L.MultiHeadAttention(HEADS, DIM // HEADS, dtype=F64, name="mha")(
      a, a, attention_mask=keras.ops.expand_dims(mask, 1))
  h = h + L.Dense(DIM, dtype=F64, name="ffn")(L.Dense(12, "relu", dtype=F64, name="ffn_in")(h))
  features = L.GlobalAveragePooling1D(dtype=F64)(h)
  head = L.Dense(WAYS, dtype=F64, name="head")
  model = keras.Model({"ids": ids, "mask": mask}, head(features), name="transformer")
  body = keras.Model(model.inputs, features, name="body")
  head_model = keras.Sequential([keras.Input((DIM,), dtype=F64), head], name="head_model")
  return model, dict(body=body, head_model=head_model)


def token_task(seed, shots=2, queries=2):
  """A 3-way episode of token sequences: class c's sequences mostly repeat token c + 1."""
  rng = np.random.default_rng(seed)

  def draw(n):
    y = np.repeat(np.arange(WAYS), n)
    ids = rng.integers(1, VOCAB, (len(y), SEQ))
    ids = np.where(rng.random(ids.shape) < 0.6, y[:, None] + 1, ids).astype(np.int32)
    mask = np.arange(SEQ)[None] < rng.integers(3, SEQ + 1, (len(y), 1))
    return {"ids": tf.constant(np.where(mask, ids, 0)), "mask": tf.constant(mask)}, \
        tf.constant(y)

  (sx, sy), (qx, qy) = draw(shots), draw(queries)
  return sx, sy, qx, qy


ATTENTION = "mha/*/kernel"


def test_adapters_on_a_transformers_attention_projections():
  """Adapters on the four attention projections (each [8, 2, 4] or [2, 4, 8] read as an
  8 x 8 matrix): at B = 0 ProtoNet's logits; with the generator random, the adapted
  query / key / value / output kernels differ, and the meta-gradient of the generator
  and of the attention kernels matches central differences along a random direction."""
  model, split = tiny_transformer()
  learner = _learner(model, adapt=ATTENTION, **split)
  assert sorted(learner.adapter_paths) == sorted(
      f"mha/{k}/kernel" for k in ("query", "key", "value", "attention_output"))
  assert set(learner.hypernetwork.matrix_shapes.values()) == {(8, 8)}
  proto = protonet.PrototypicalNetwork(model, LOSS, **split)
  sx, sy, qx, qy = token_task(0)
  np.testing.assert_allclose(learner.distance_logits(sx, sy, qx).numpy(),
                             proto.distance_logits(sx, sy, qx).numpy(), rtol=1e-13,
                             atol=1e-13)
  _perturb_generator(learner, seed=3)
  fast, _ = learner.adapt(sx, sy)
  variables = functional.variable_paths(model)
  for p in learner.adapter_paths:
    assert np.abs(fast[p].numpy() - variables[p].numpy()).max() > 1e-3, p
  trained = list(learner.trainable_variables) + [variables[p] for p in learner.adapter_paths]

  def loss():
    fast, state = learner.adapt(sx, sy)
    return learner.loss_fn(qy, functional.functional_call(model, fast, qx, state=state))

  rng = np.random.default_rng(7)
  direction = [rng.normal(size=v.shape) for v in trained]
  with tf.GradientTape() as tape:
    value = loss()
  grads = tape.gradient(value, trained)
  analytic = sum(float(np.sum(g.numpy() * d)) for g, d in zip(grads, direction))
  base = [v.numpy().copy() for v in trained]

  def at(h):
    for v, b, d in zip(trained, base, direction):
      v.assign(b + h * d)
    return float(loss())

  h = 1e-5
  numeric = (at(h) - at(-h)) / (2 * h)
  at(0.0)
  assert abs(analytic) > 1e-3
  assert analytic == pytest.approx(numeric, rel=1e-7)


def test_meta_model_trains_the_transformers_adapters():
  """hn.keras.MetaModel(transformer, "support_adapter", learner_args=(adapt, body,
  head_model)): fit() on token episodes trains the generator and the body, not the
  head; predict gives the query logits of the adapted model."""
  model, split = tiny_transformer()
  meta = MetaModel(model, "support_adapter",
                   learner_args=dict(adapt=ATTENTION, rank=2, generator_widths=(4,), **split))
  assert isinstance(meta.learner, support_adapter.SupportAdapter)
  head = [v.numpy().copy() for v in model.get_layer("head").weights]
  generator = [v.numpy().copy() for v in meta.learner.hypernetwork.trainable_variables]
  tasks = [token_task(s) for s in range(2)]
  batch = {k: tf.nest.map_structure(lambda *t: tf.stack(t), *[t[i] for t in tasks])
           for i, k in enumerate(meta_batch.BATCH_KEYS)}
  data = tf.data.Dataset.from_tensors(batch).repeat(3)
  meta.compile(optimizer=keras.optimizers.Adam(1e-2))
  history = meta.fit(data, epochs=1, verbose=0)
  assert np.isfinite(history.history["loss"][0])
  assert max(np.abs(a - b.numpy()).max() for a, b in
             zip(generator, meta.learner.hypernetwork.trainable_variables)) > 0
  for a, b in zip(head, model.get_layer("head").weights):
    np.testing.assert_array_equal(a, b.numpy())
  out = meta.predict(tf.data.Dataset.from_tensors(batch), verbose=0)
  fast, state = meta.learner.adapt(tasks[0][0], tasks[0][1])
  want = functional.functional_call(model, fast, tasks[0][2], training=True, state=state)
  np.testing.assert_allclose(out[0], want.numpy(), rtol=1e-10, atol=1e-10)


def _digit_episodes(tasks=2, seed=0):
  d = load_digits()
  data = episodes.class_indexed(d.x_train.astype(np.float32) / 16, d.y_train)
  fn = episodes.make_episode_fn(data, num_ways=5, num_shots=1, num_queries=2, seed=seed)
  return tf.data.Dataset.range(10 ** 6).map(fn).batch(tasks)


def test_meta_model_on_conv4_saves_and_loads_the_generator(tmp_path):
  """MetaModel(conv4, "support_adapter"): the generator is among the trained weights,
  fit() moves it, and the saved file brings it back (the same predictions)."""
  keras.utils.set_random_seed(9)
  model = MetaModel(conv4.make_conv4(5, (8, 8, 1), filters=4, num_blocks=2),
                    "support_adapter", learner_args=dict(rank=2, generator_widths=(4,)))
  generator = list(model.learner.hypernetwork.trainable_variables)
  assert len(model.trainable_weights) == len(model.target.trainable_weights) - 2 + len(
      generator)   # The body and the generator; not the head.
  before = _values(generator)
  model.compile(optimizer=keras.optimizers.Adam(1e-2))
  model.fit(_digit_episodes(), steps_per_epoch=3, epochs=1, verbose=0)
  assert max(np.abs(a - b.numpy()).max() for a, b in zip(before, generator)) > 0
  model.save(str(tmp_path / "a.keras"))
  loaded = keras.models.load_model(str(tmp_path / "a.keras"))
  assert isinstance(loaded.learner, support_adapter.SupportAdapter)
  for a, b in zip(loaded.learner.hypernetwork.trainable_variables, generator):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  batch = tf.data.Dataset.from_tensors(next(iter(_digit_episodes(seed=2))))
  np.testing.assert_array_equal(loaded.predict(batch, verbose=0),
                                model.predict(batch, verbose=0))
  assert sorted(model.evaluate(batch, verbose=0, return_dict=True)) == ["accuracy", "loss"]
  assert hn.meta.SupportAdapter is support_adapter.SupportAdapter
