"""Meta-batches: tf.map_fn / tf.vectorized_map over tasks, and per-task meta-gradient
accumulation (meta_batch_gradients), against exact values and a per-task Python loop."""
import numpy as np
import pytest
import keras
import tensorflow as tf

from hypernet.core import functional
from hypernet.meta import anil, conv4, inner_loop, losses, meta_batch


def toy_batch():
  """f(x) = theta x, theta0 = 0; task t: support (1, a_t), query (1, b_t)."""
  a = np.array([1.0, 2.0, -1.0], np.float32)
  b = np.array([3.0, 0.0, 1.0], np.float32)
  ones = tf.ones([3, 1, 1])
  return {"support_x": ones, "support_y": tf.constant(a[:, None]),
          "query_x": ones, "query_y": tf.constant(b[:, None])}, a, b


@pytest.mark.parametrize("parallel", meta_batch.PARALLEL)
@pytest.mark.parametrize("first_order", [False, True])
def test_toy_meta_batch_exact(parallel, first_order):
  """theta'_t = 2 alpha a_t = 0.2 a_t (alpha = 0.1); query loss (0.2 a_t - b_t)^2,
  before b_t^2; meta-gradient mean_t 2 (0.2 a_t - b_t) (1 - 2 alpha) (second order) or
  without the factor 0.8 (first order)."""
  model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
      1, use_bias=False, kernel_initializer="zeros", name="w")])
  learner = inner_loop.MAML(model, "mse", inner_lr=0.1, first_order=first_order)
  batch, a, b = toy_batch()

  @tf.function
  def step(batch):
    with tf.GradientTape() as tape:
      result = meta_batch.meta_batch_loss(learner, batch, parallel=parallel)
    return result, tape.gradient(result.loss, model.trainable_variables)

  for _ in range(3):
    result, (grad,) = step(batch)
  assert step.experimental_get_tracing_count() == 1
  after = (0.2 * a - b) ** 2
  np.testing.assert_allclose(result.loss.numpy(), after.mean(), rtol=1e-6)
  np.testing.assert_allclose(result.per_task["loss"].numpy(), after, rtol=1e-6)
  assert sorted(result.metrics) == ["loss", "loss_before"]  # regression
  np.testing.assert_allclose(result.metrics["loss"].numpy(), after.mean(),
                             rtol=1e-6)
  np.testing.assert_allclose(result.metrics["loss_before"].numpy(), (b ** 2).mean(),
                             rtol=1e-6)
  factor = 1.0 if first_order else 0.8
  np.testing.assert_allclose(grad.numpy().item(), (2 * (0.2 * a - b) * factor).mean(),
                             rtol=1e-5)
  result = meta_batch.meta_batch_loss(learner, batch, parallel=parallel,
                                      before_metrics=False)
  assert sorted(result.metrics) == ["loss"]
  np.testing.assert_allclose(result.loss.numpy(), after.mean(), rtol=1e-6)


@pytest.mark.parametrize("first_order", [False, True])
def test_toy_accumulated_meta_gradients_exact(first_order):
  """As above, the meta-gradient summed task by task in a while loop; task_weight
  scales every task (0.5 here: half the sum, not the mean)."""
  model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
      1, use_bias=False, kernel_initializer="zeros", name="w")])
  learner = inner_loop.MAML(model, "mse", inner_lr=0.1, first_order=first_order)
  batch, a, b = toy_batch()
  factor = 1.0 if first_order else 0.8
  after = (0.2 * a - b) ** 2
  for task_weight, expected, staggered in (
      (None, (2 * (0.2 * a - b) * factor).mean(), False),
      (0.5, 0.5 * (2 * (0.2 * a - b) * factor).sum(), False),
      (None, (2 * (0.2 * a - b) * factor).mean(), True)):
    result = tf.function(lambda batch, w=task_weight, st=staggered:
                         meta_batch.meta_batch_gradients(
                             learner, batch, model.trainable_variables, task_weight=w,
                             before_metrics=True, parallel_iterations=1 + st,
                             staggered=st))(batch)
    np.testing.assert_allclose(result.variable_grads[0].numpy().item(), expected, rtol=1e-5)
    np.testing.assert_allclose(result.loss.numpy(), after.mean(), rtol=1e-6)
    np.testing.assert_allclose(result.per_task["loss"].numpy(), after, rtol=1e-6)
    np.testing.assert_allclose(result.per_task["loss_before"].numpy(), b ** 2,
                               rtol=1e-6)
  # Eagerly the loop runs in Python: same numbers.
  eager = meta_batch.meta_batch_gradients(learner, batch, model.trainable_variables)
  np.testing.assert_allclose(eager.variable_grads[0].numpy().item(),
                             (2 * (0.2 * a - b) * factor).mean(), rtol=1e-5)
  assert sorted(eager.metrics) == ["loss"]  # no query pass before adaptation
  with pytest.raises(ValueError, match="variables must be tf.Variables"):
    meta_batch.meta_batch_gradients(learner, batch, [tf.constant(1.0)])


def synthetic_fewshot_batch(tasks=3, ways=3, shots=1, queries=2, size=16, seed=0):
  rng = np.random.default_rng(seed)
  labels = lambda k: np.tile(np.arange(ways), [tasks, k]).astype(np.int32)
  return {
      "support_x": tf.constant(rng.normal(size=(tasks, ways * shots, size, size, 1)),
                               tf.float32),
      "support_y": tf.constant(labels(shots)),
      "query_x": tf.constant(rng.normal(size=(tasks, ways * queries, size, size, 1)),
                             tf.float32),
      "query_y": tf.constant(labels(queries)),
  }


def reference(learner, batch, variables, weights_fn=None):
  """Per-task Python loop, eager: (loss, metrics, state, gradients)."""
  model = learner.model
  state0 = {p: v.value for p, v in functional.variable_paths(model, False).items()}
  with tf.GradientTape() as tape:
    weights = weights_fn() if weights_fn else None
    init = learner.initial_weights(weights)
    per_task, states = [], []
    for t in range(batch["support_x"].shape[0]):
      fast, st = learner.adapt(batch["support_x"][t], batch["support_y"][t], weights=init)
      before = functional.functional_call(model, init, batch["query_x"][t], training=True)
      after, st = functional.functional_call(model, fast, batch["query_x"][t],
                                             training=True, return_state=True, state=st)
      qy = batch["query_y"][t]
      per_task.append({"loss": learner.loss_fn(qy, after),
                       "loss_before": learner.loss_fn(qy, before),
                       "accuracy": losses.sparse_accuracy(qy, after),
                       "accuracy_before": losses.sparse_accuracy(qy, before)})
      states.append(st)
    loss = tf.reduce_mean([r["loss"] for r in per_task])
  metrics = {k: np.mean([r[k].numpy() for r in per_task]) for k in per_task[0]}
  state = {p: np.mean([s[p].numpy() for s in states], axis=0) for p in state0}
  return loss, metrics, state, tape.gradient(loss, variables)


LEARNERS = {
    "maml": lambda m: inner_loop.MAML(m, "sparse_softmax_cross_entropy", inner_lr=0.3,
                                      inner_steps=2),
    "fomaml": lambda m: inner_loop.FirstOrderMAML(m, "sparse_softmax_cross_entropy",
                                                  inner_lr=0.3, inner_steps=2),
    "metasgd": lambda m: inner_loop.MetaSGD(m, "sparse_softmax_cross_entropy",
                                            inner_lr=0.3, adapt="conv2/*,head/*"),
    "anil": lambda m: anil.ANIL(m, "sparse_softmax_cross_entropy", inner_lr=0.3,
                                inner_steps=2),
}


def _assert_matches(result, grads, reference_values, variables, how):
  """``result`` (loss, metrics, state) and ``grads`` equal the per-task reference."""
  ref_loss, ref_metrics, ref_state, ref_grads = reference_values
  np.testing.assert_allclose(result.loss.numpy(), ref_loss.numpy(), rtol=1e-5)
  assert sorted(result.metrics) == sorted(ref_metrics)
  for k, v in ref_metrics.items():
    np.testing.assert_allclose(result.metrics[k].numpy(), v, rtol=1e-5, err_msg=k)
  for p, v in ref_state.items():
    np.testing.assert_allclose(result.state[p].numpy(), v, rtol=1e-5, atol=1e-6, err_msg=p)
  for v, g, r in zip(variables, grads, ref_grads):
    np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=2e-4, atol=2e-6,
                               err_msg=f"{how} {getattr(v, 'path', v.name)}")


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_conv4_meta_batch_matches_per_task_loop(name):
  keras.utils.set_random_seed(0)
  # Two conv blocks (each with its BatchNorm state) on 8x8 images: what is compared does
  # not depend on the depth, and tracing (most of the test's CPU) halves with it.
  model = conv4.make_conv4(3, (8, 8, 1), filters=4, num_blocks=2)
  learner = LEARNERS[name](model)
  variables = model.trainable_variables + list(learner.trainable_variables)
  batch = synthetic_fewshot_batch(size=8)
  expected = reference(learner, batch, variables)
  # vectorized_map is checked on second-order MAML only, to keep the file fast.
  for parallel in meta_batch.PARALLEL if name == "maml" else ("map_fn",):
    @tf.function
    def step(batch):
      with tf.GradientTape() as tape:
        result = meta_batch.meta_batch_loss(learner, batch, parallel=parallel)
      return result, tape.gradient(result.loss, variables)

    result, grads = step(batch)
    _assert_matches(result, grads, expected, variables, parallel)
  # Per-task accumulation: the same values, each task's meta-gradient taken in its loop
  # iteration; one task in flight, two, and two staggered (the gradient in two parts).
  for in_flight, staggered in ((1, False), (2, False), (2, True)):
    result = tf.function(lambda batch: meta_batch.meta_batch_gradients(
        learner, batch, variables, before_metrics=True, parallel_iterations=in_flight,
        staggered=staggered))(batch)
    _assert_matches(result, result.variable_grads, expected, variables,
                    f"accumulate, {in_flight} in flight, staggered={staggered}")


def test_meta_batch_hypernetwork_weights_get_gradients():
  """Initial weights from a toy generator: the meta-gradient reaches its variable, the
  same through tf.map_fn as through a per-task loop."""
  keras.utils.set_random_seed(1)
  model = conv4.make_conv4(3, (8, 8, 1), filters=4, num_blocks=2)  # Small: as above.
  spec = functional.weight_spec(model, "head/*")
  z = tf.Variable(tf.random.normal([8], seed=2))
  proj = {p: tf.random.normal([8, int(np.prod(s.shape))], seed=3) * 0.1
          for p, s in spec.items()}
  generate = lambda: {p: tf.reshape(tf.linalg.matvec(proj[p], z, transpose_a=True),
                                    spec[p].shape) for p in spec}
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.3)
  batch = synthetic_fewshot_batch(size=8, seed=4)
  variables = [z] + model.trainable_variables
  _, _, _, ref_grads = reference(learner, batch, variables, weights_fn=generate)

  @tf.function
  def step(batch):
    with tf.GradientTape() as tape:
      result = meta_batch.meta_batch_loss(learner, batch, weights=generate())
    return tape.gradient(result.loss, variables)

  grads = step(batch)
  head = [i for i, v in enumerate(variables) if "head" in getattr(v, "path", "")]
  assert all(grads[i] is None and ref_grads[i] is None for i in head)  # generated instead
  assert np.abs(grads[0].numpy()).max() > 0
  for g, r in zip(grads, ref_grads):
    if r is not None:
      np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=2e-4, atol=2e-6)

  for staggered in (False, True):
    @tf.function
    def accumulated(batch):  # The generator runs once; its output's summed gradient is
      with tf.GradientTape() as tape:  # chained through it once.
        weights = generate()
      result = meta_batch.meta_batch_gradients(learner, batch, variables, weights=weights,
                                               parallel_iterations=1 + staggered,
                                               staggered=staggered)
      paths = list(weights)
      chained = tape.gradient([weights[p] for p in paths], variables,
                              output_gradients=[result.weight_grads[p] for p in paths])
      return [c if g is None else g for g, c in zip(result.variable_grads, chained)]

    grads = accumulated(batch)
    assert all(grads[i] is None for i in head)
    for g, r in zip(grads, ref_grads):
      if r is not None:
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=2e-4, atol=2e-6,
                                   err_msg=f"staggered={staggered}")


def test_meta_batch_bad_input():
  model = conv4.make_conv4(3, (16, 16, 1), filters=4)
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy")
  batch = synthetic_fewshot_batch()
  with pytest.raises(ValueError, match="lacks \\['query_y'\\]"):
    meta_batch.meta_batch_loss(learner, {k: v for k, v in batch.items() if k != "query_y"})
  with pytest.raises(ValueError, match="number of tasks"):
    meta_batch.meta_batch_loss(learner, dict(batch, query_y=batch["query_y"][:2]))
  with pytest.raises(ValueError, match="parallel="):
    meta_batch.meta_batch_loss(learner, batch, parallel="python")


def test_make_conv4_shapes_and_paths():
  model = conv4.make_conv4(5)
  assert model.output_shape == (None, 5)
  assert functional.select_paths(model, "head/*") == ["head/kernel", "head/bias"]
  assert tuple(model.get_layer("head").kernel.shape) == (64, 5)  # 28 -> 14 -> 7 -> 3 -> 1
  assert len(functional.select_paths(model, "bn*/moving_*", trainable=False)) == 8
  with pytest.raises(ValueError, match="too small"):
    conv4.make_conv4(5, (8, 8, 1))


def test_maml_learns_sinusoid_regression():
  """Finn et al. 2017 Sec. 5.1 setting (MLP 40-40, alpha 0.01, one inner step, K = 10,
  meta-batch 25, Adam 1e-3), 1000 meta-steps on the project's sinusoid tasks: on 100
  held-out tasks one inner step must cut the query MSE to under half its value at the
  meta-learned initialisation (measured: 3.08 -> 0.96)."""
  from hypernet.data import sinusoid  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  model = keras.Sequential([
      keras.Input((1,)), keras.layers.Dense(40, activation="relu", name="h1"),
      keras.layers.Dense(40, activation="relu", name="h2"), keras.layers.Dense(1, name="out")])
  learner = inner_loop.MAML(model, "mse", inner_lr=0.01)
  optimizer = keras.optimizers.Adam(1e-3)
  variables = model.trainable_variables
  optimizer.build(variables)

  @tf.function
  def step(batch):
    with tf.GradientTape() as tape:
      result = meta_batch.meta_batch_loss(learner, batch, before_metrics=False)
    optimizer.apply_gradients(zip(tape.gradient(result.loss, variables), variables))

  for batch in sinusoid.sinusoid_dataset(meta_batch_size=25, num_support=10,
                                         num_query=10, seed=0, num_steps=1000):
    step(batch)
  held_out = next(iter(sinusoid.sinusoid_dataset(meta_batch_size=100, num_support=10,
                                                 num_query=10, seed=123, num_steps=1)))
  metrics = meta_batch.meta_batch_loss(learner, held_out).metrics
  before = float(metrics["loss_before"])
  after = float(metrics["loss"])
  assert after < 0.5 * before, (before, after)


def test_staggered_equals_unstaggered_where_the_query_pass_reads_adapted_state():
  """Staggered tasks take the gradient in two parts. With ``query_training=False`` the
  query pass reads the BatchNorm moving statistics the inner steps updated (functions
  of the weights): their gradient must go back through the inner loop too. Float64,
  every second-order learner, against the one-tape path and a finite difference."""
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((6,), dtype="float64"),
                            keras.layers.Dense(5, name="d1", dtype="float64"),
                            keras.layers.BatchNormalization(name="bn", dtype="float64"),
                            keras.layers.Dense(3, name="head", dtype="float64")])
  rng = np.random.default_rng(0)
  y = tf.constant(np.tile(np.arange(3), [2, 2]), tf.int32)
  batch = {"support_x": tf.constant(rng.normal(size=(2, 6, 6))), "support_y": y,
           "query_x": tf.constant(rng.normal(size=(2, 6, 6))), "query_y": y}
  variables = model.trainable_variables
  for learner in (inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.3,
                                  inner_steps=2),
                  inner_loop.MetaSGD(model, "sparse_softmax_cross_entropy", inner_lr=0.3)):
    sources = variables + list(learner.trainable_variables)
    run = lambda **kw: tf.function(lambda b: meta_batch.meta_batch_gradients(
        learner, b, sources, query_training=False, **kw))
    # One trace of the plain path, called again for the finite difference below (it
    # reads the variables when run).
    plain_fn = run()
    plain, staggered = plain_fn(batch), run(parallel_iterations=2, staggered=True)(batch)
    for v, a, b in zip(sources, plain.variable_grads, staggered.variable_grads):
      np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-10, atol=1e-12,
                                 err_msg=getattr(v, "path", v.name))
    bias, h = variables[1], 1e-6
    b0 = bias.numpy()
    step = np.zeros_like(b0)
    step[0] = h
    bias.assign(b0 + step)
    up = float(plain_fn(batch).loss)
    bias.assign(b0 - step)
    down = float(plain_fn(batch).loss)
    bias.assign(b0)
    np.testing.assert_allclose(staggered.variable_grads[1].numpy()[0], (up - down) / (2 * h),
                               rtol=1e-6)


def test_staggered_adds_sparse_gradient_parts():
  """A weight read through a gather both in the inner loop and directly in the query
  pass gets IndexedSlices from both gradient parts; they are summed."""
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,), dtype="int32"),
                            keras.layers.Embedding(10, 3, name="emb"), keras.layers.Flatten(),
                            keras.layers.Dense(3, name="head")])
  learner = inner_loop.MAML(model, "sparse_softmax_cross_entropy", inner_lr=0.3,
                            adapt="head/*")
  rng = np.random.default_rng(1)
  y = tf.constant(np.tile(np.arange(3), [2, 2]), tf.int32)
  batch = {"support_x": tf.constant(rng.integers(0, 10, (2, 6, 4)), tf.int32),
           "support_y": y,
           "query_x": tf.constant(rng.integers(0, 10, (2, 6, 4)), tf.int32), "query_y": y}
  run = lambda **kw: tf.function(lambda b: meta_batch.meta_batch_gradients(
      learner, b, model.trainable_variables, **kw))(batch)
  plain, staggered = run(), run(parallel_iterations=2, staggered=True)
  for a, b in zip(plain.variable_grads, staggered.variable_grads):
    np.testing.assert_allclose(tf.convert_to_tensor(b).numpy(),
                               tf.convert_to_tensor(a).numpy(), rtol=1e-5, atol=1e-7)


def test_a_meta_batch_whose_trace_raises_leaves_the_process_usable():
  """``tf.map_fn`` traced leaves a caching device on the shared variable scope when the
  mapped function raises (hypernet.core.control_flow): every later variable made under a
  strategy then failed. The meta-batch's trace raises (a loss that branches in Python on
  a tensor); afterwards the scope is clean and a model and its optimiser build under a
  OneDeviceStrategy, as in a fresh process."""
  def branchy_mse(y, pred):
    error = tf.reduce_mean(tf.square(y - pred))
    return tf.zeros([]) if error > 1e6 else error

  model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(2), keras.layers.Dense(1)])
  learner = inner_loop.MAML(model, branchy_mse, inner_lr=0.1)
  batch = {k: tf.ones([2, 3, 1]) for k in ("support_x", "support_y", "query_x", "query_y")}
  for parallel in meta_batch.PARALLEL:
    with pytest.raises(TypeError, match="decorate this function with @tf.function"):
      tf.function(lambda b, p=parallel: meta_batch.meta_batch_loss(learner, b, parallel=p)
                  .loss)(batch)
    assert tf.compat.v1.get_variable_scope().caching_device is None, parallel
  with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
    fresh = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam()
    optimizer.build(fresh.trainable_variables)
  assert len(optimizer.variables) == 6  # iteration, learning rate, (m, v) per kernel and bias
