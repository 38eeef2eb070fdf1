"""hn.FusedAdam: Keras' Adam update as one ResourceApplyAdam per variable. The values of
Adam (NumPy in float64, Keras to float32 rounding), the kernel actually used, Keras'
own update where it does not apply, checkpoints shared with Keras' Adam, and the
Trainer's ``optim.name = "fused_adam"``."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import keras
import tensorflow as tf

import hypernet as hn
from hypernet.training import distribute, loop

SHAPES = [(7, 5), (5,), (3, 3, 2, 4)]


def _variables(dtype=np.float32):
  rng = np.random.default_rng(0)
  return [tf.Variable(rng.normal(size=s).astype(dtype)) for s in SHAPES]


def _grads(variables, k):
  return [tf.cast(tf.random.stateless_normal(v.shape, [k, i]), v.dtype)
          for i, v in enumerate(variables)]


def _train(opt, variables, steps, first=0):
  @tf.function(autograph=False)
  def step(k):
    opt.apply(_grads(variables, k), variables)
  for k in range(first, first + steps):
    step(tf.constant(k))
  return [v.numpy() for v in variables]


def _numpy_adam(x0, grads, lr, b1=0.9, b2=0.999, eps=1e-7):
  """Kingma & Ba 2015, Algorithm 1, epsilon outside the square root (Keras' form)."""
  x, m, v = [a.copy() for a in x0], [np.zeros_like(a) for a in x0], [np.zeros_like(a) for a in x0]
  for t, g in enumerate(grads, 1):
    alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    for i, gi in enumerate(g):
      m[i] += (gi - m[i]) * (1 - b1)
      v[i] += (gi * gi - v[i]) * (1 - b2)
      x[i] -= alpha * m[i] / (np.sqrt(v[i]) + eps)
  return x


def test_float64_values_are_adams():
  """To the last bit (Keras' own Adam is ~1e-6 off here: its bias correction's betas
  pass through float32)."""
  variables = _variables(np.float64)
  x0 = [v.numpy() for v in variables]
  grads = [[g.numpy() for g in _grads(variables, k)] for k in range(30)]
  out = _train(hn.FusedAdam(0.05), variables, 30)
  lr = float(np.float32(0.05))   # Keras holds the rate in a float32 variable
  for got, want in zip(out, _numpy_adam(x0, grads, lr)):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)


def test_float32_values_match_keras_adam_and_use_the_fused_kernel():
  fused, plain = hn.FusedAdam(0.05), keras.optimizers.Adam(0.05)
  a = _train(fused, _variables(), 30)
  b = _train(plain, _variables(), 30)
  for x, y in zip(a, b):
    np.testing.assert_allclose(x, y, rtol=0, atol=2e-5)   # steps of 0.05, 30 of them

  def ops(opt):
    variables = _variables()
    opt.build(variables)
    graph = tf.function(lambda: opt.apply(_grads(variables, 0), variables),
                        autograph=False).get_concrete_function().graph
    return [op.type for op in graph.get_operations()]
  assert ops(hn.FusedAdam(0.05)).count("ResourceApplyAdam") == len(SHAPES)
  assert ops(keras.optimizers.Adam(0.05)).count("ResourceApplyAdam") == 0


def test_keras_update_where_the_kernel_does_not_apply():
  """amsgrad and sparse gradients run Keras' own update: equal to Keras' Adam bit for bit."""
  a = _train(hn.FusedAdam(0.05, amsgrad=True), _variables(), 10)
  b = _train(keras.optimizers.Adam(0.05, amsgrad=True), _variables(), 10)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)

  def sparse(opt):
    table = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3))
    for _ in range(3):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(tf.gather(table, [0, 2])))
      grad = tape.gradient(loss, table)
      assert isinstance(grad, tf.IndexedSlices)
      opt.apply([grad], [table])
    return table.numpy()
  np.testing.assert_array_equal(sparse(hn.FusedAdam(0.1)), sparse(keras.optimizers.Adam(0.1)))


def test_checkpoints_are_shared_with_keras_adam(tmp_path):
  """A Keras Adam checkpoint restores into FusedAdam (same slots, same names) and the
  run goes on as Keras' Adam would, to float32 rounding."""
  variables = _variables()
  plain = keras.optimizers.Adam(0.05)
  _train(plain, variables, 5)
  path = tf.train.Checkpoint(optimizer=plain, variables=variables).save(str(tmp_path / "c"))
  assert [v.name for v in hn.FusedAdam(0.05).variables] == [v.name for v in plain.variables][:2]
  restored = _variables()
  fused = hn.FusedAdam(0.05)
  fused.build(restored)
  tf.train.Checkpoint(optimizer=fused, variables=restored).restore(path).assert_consumed()
  assert int(fused.iterations) == 5
  a = _train(fused, restored, 5, first=5)
  b = _train(plain, variables, 5, first=5)
  for x, y in zip(a, b):
    np.testing.assert_allclose(x, y, rtol=0, atol=1e-5)


def test_config_round_trip():
  opt = hn.FusedAdam(3e-3, beta_2=0.99, epsilon=1e-6, global_clipnorm=1.0)
  again = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
  assert type(again) is hn.FusedAdam
  assert again.get_config() == opt.get_config()


def test_trainer_fused_adam_trains_as_adam(tmp_path):
  """``config.optim.name = "fused_adam"``: the main job's first 60 steps end at Adam's
  loss and accuracy (the rounding differences grow over the steps)."""
  import sys, os  # pylint: disable=g-import-not-at-top,multiple-imports
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs"))
  import digits_hyper  # pylint: disable=g-import-not-at-top
  results = {}
  for name in ("adam", "fused_adam"):
    c = digits_hyper.get_config()
    c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 60, 60, 60, 60
    c.optim.name = name
    results[name] = loop.train_and_evaluate(c, str(tmp_path / name))
    assert type(loop.make_optimizer(c.optim, 60)).__name__ == (
        "FusedAdam" if name == "fused_adam" else "Adam")
  assert results["fused_adam"]["loss"] == pytest.approx(results["adam"]["loss"], rel=1e-2)
  assert abs(results["fused_adam"]["accuracy"] - results["adam"]["accuracy"]) <= 2 / 359


def test_mirrored_replicas_stay_equal():
  """Under MirroredStrategy (two logical CPUs, tests/conftest.py) every replica's copy
  takes the same update, the mean gradient's, as with Keras' Adam."""
  def run(cls):
    strategy = distribute.get_strategy("mirrored")   # the process's one (two CPUs)
    with strategy.scope():
      v = keras.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))
      optimizer = cls(0.1)
      optimizer.build([v])

    @tf.function(autograph=False)
    def step(k):
      def replica():
        i = tf.distribute.get_replica_context().replica_id_in_sync_group
        grad = tf.cast(i + 1, tf.float32) * tf.sin(tf.range(6.0) + k)
        optimizer.apply([tf.reshape(grad, [2, 3])], [v])
      strategy.run(replica)
    for k in range(4):
      step(tf.constant(float(k)))
    return [x.numpy() for x in strategy.experimental_local_results(v.value)]
  fused, plain = run(hn.FusedAdam), run(keras.optimizers.Adam)
  np.testing.assert_array_equal(fused[0], fused[1])
  np.testing.assert_allclose(fused[0], plain[0], rtol=0, atol=1e-5)


_LOAD_CHILD = """
import json, sys
import numpy as np
import hypernet
import keras
model = keras.models.load_model(sys.argv[1])
opt = model.optimizer
want = np.load(sys.argv[2])
print(json.dumps({"type": type(opt).__name__, "iterations": int(opt.iterations.numpy()),
                  "config": {k: str(v) for k, v in opt.get_config().items()},
                  "slots_equal": all(np.array_equal(v.numpy(), want[f"arr_{i}"])
                                     for i, v in enumerate(opt.variables))}))
"""


def test_a_saved_model_loads_with_its_fused_adam_after_import_hypernet(tmp_path):
  """A model compiled with FusedAdam and saved loads in a new process after ``import
  hypernet`` alone (the class is registered with Keras before its module is imported),
  with its config and every slot value."""
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
  model.compile(optimizer=hn.FusedAdam(1e-2, beta_2=0.99), loss="mse")
  x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
  model.fit(x, x[:, :3], epochs=2, batch_size=4, verbose=0)
  model.save(str(tmp_path / "m.keras"))
  np.savez(tmp_path / "slots.npz", *[v.numpy() for v in model.optimizer.variables])
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-c", _LOAD_CHILD, str(tmp_path / "m.keras"),
                        str(tmp_path / "slots.npz")], capture_output=True, text=True,
                       timeout=300, env=env, cwd=tmp_path, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert got["type"] == "FusedAdam" and got["iterations"] == 4 and got["slots_equal"]
  assert got["config"]["beta_2"] == "0.99"
