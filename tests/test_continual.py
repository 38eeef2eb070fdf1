"""Continual learning (von Oswald et al. 2020): the output regulariser's exact values,
protection of earlier tasks' weights, resume inside the sequence, entropy task
inference, and the baselines in the same loop (on split digits: embedded, fast)."""
import json
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

from hypernet.continual import regularizers, task_inference
from hypernet.training import loop
from hypernet.tasks import continual_learning
from hypernet.data import continual as cl_data
from hypernet.data.digits import load_digits

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "configs"))
import split_fmnist_hnet  # noqa: E402  pylint: disable=g-import-not-at-top


def test_output_regularizer_toy_values():
  """h(e) = A e, A = [[1, 2]], stored target 1.5 for e_0 = [1, 0], beta = 0.1, one
  previous task: 0.1 * (1 - 1.5)^2 = 0.025, d/dA = [[-0.1, 0]]."""
  a = tf.Variable([[1.0, 2.0]], dtype=tf.float64)
  e0 = tf.constant([[1.0], [0.0]], tf.float64)
  with tf.GradientTape() as tape:
    generated = tf.transpose(a @ e0)                  # [S=1, P=1]
    penalty = regularizers.output_regularizer(
        generated, tf.constant([[1.5]], tf.float64), beta=0.1)
  assert float(penalty) == pytest.approx(0.025, abs=1e-15)
  np.testing.assert_allclose(tape.gradient(penalty, a).numpy(), [[-0.1, 0.0]], atol=1e-15)


def test_ewc_penalty_and_fisher_values():
  theta = tf.Variable([1.0, 3.0])
  with tf.GradientTape() as tape:
    pen = regularizers.ewc_penalty([theta], [tf.constant([0.0, 1.0])],
                                      [tf.constant([2.0, 0.5])], strength=4.0)
  # 4/2 * (2 * 1 + 0.5 * 4) = 8;  d/dtheta = 4 * F * (theta - anchor) = [8, 4].
  assert float(pen) == pytest.approx(8.0)
  np.testing.assert_allclose(tape.gradient(pen, theta).numpy(), [8.0, 4.0])
  # log p(y|x) = -(x w - y)^2: gradient -2 x (x w - y); at w = 1, x = [1, 2], y = [0, 0]:
  # squares 4 and 64, mean 34.
  w = tf.Variable([1.0])
  fisher = regularizers.diagonal_fisher(
      lambda x, y: -tf.reduce_sum(tf.square(x * w - y)), [w],
      tf.constant([1.0, 2.0]), tf.constant([0.0, 0.0]))
  np.testing.assert_allclose(fisher[0].numpy(), [34.0])


def test_entropy_task_inference_picks_the_confident_task():
  logits = tf.constant([[[0.1, 0.0], [5.0, -5.0]],       # task 0: unsure, then confident
                        [[9.0, -9.0], [0.2, 0.1]],       # task 1: confident, then unsure
                        [[-20.0, 20.0], [-20.0, 20.0]]])  # task 2: most confident, unseen
  task, cls = continual_learning.entropy_task_inference(logits, tf.constant([True, True, False]))
  np.testing.assert_array_equal(task.numpy(), [1, 0])
  np.testing.assert_array_equal(cls.numpy(), [0, 0])
  task, cls = continual_learning.entropy_task_inference(logits, tf.constant([True, True, True]))
  np.testing.assert_array_equal(task.numpy(), [2, 2])
  np.testing.assert_array_equal(cls.numpy(), [1, 1])


def test_split_and_permuted_tasks():
  data = load_digits()
  split = cl_data.split_tasks(data, 5)
  assert [d.num_classes for d in split] == [2] * 5
  assert sum(len(d.y_train) for d in split) == len(data.y_train)
  assert set(np.unique(split[3].y_train)) == {0, 1}
  np.testing.assert_array_equal(split[3].x_train, data.x_train[(data.y_train >= 6) &
                                                               (data.y_train < 8)])
  perm = cl_data.permuted_tasks(data, 3, seed=7)
  np.testing.assert_array_equal(perm[0].x_train, data.x_train)      # task 0 unpermuted
  p1 = cl_data.permutation(64, 1, 7)
  np.testing.assert_array_equal(perm[1].x_test.reshape(len(data.x_test), -1),
                                data.x_test.reshape(len(data.x_test), -1)[:, p1])
  assert not np.array_equal(p1, cl_data.permutation(64, 2, 7))
  with pytest.raises(ValueError, match="num_tasks=6 tasks of 2 classes need 12"):
    cl_data.split_tasks(data, 6)


def _config(method="hnet", steps=40, tasks=2, **overrides):
  c = split_fmnist_hnet.get_config()
  c.data.name = "digits"
  c.continual.method = method
  c.continual.num_tasks = tasks
  c.continual.steps_per_task = steps
  c.num_steps = tasks * steps
  c.batch_size = 32
  c.eval_batch_size = 200
  c.log_every = 20
  c.checkpoint_every = 20
  c.model.dense_widths = (32,)
  c.hypernet.chunk_size = 512
  c.hypernet.hidden = (32,)
  c.optim.schedule = "constant"   # 20-40 steps per task: no decay (tests that want it say so)
  c.update_from_flattened_dict(overrides)
  return c


def _restored(config, workdir):
  trainer = loop.Trainer(config, str(workdir))
  trainer.restore()
  return trainer


def _copy_of(workdir, tmp_path):
  shutil.copytree(workdir, tmp_path, dirs_exist_ok=True)
  return tmp_path


def _sequence_config(method, **overrides):
  """3 tasks x 20 steps, a checkpoint every 10 steps, all kept (those at the tasks' ends
  too: 20, 40, 60)."""
  return _config(method, steps=20, tasks=3,
                 **dict({"checkpoint_every": 10, "checkpoint_keep": 6}, **overrides))


@pytest.fixture(scope="module")
def sequence_runs(tmp_path_factory):
  """``sequence_runs(method)``: (config, result, workdir) of the uninterrupted
  _sequence_config run, trained once for the tests that read it (never written to: a
  test that restores or resumes it works on a copy)."""
  runs = {}

  def get(method):
    if method not in runs:
      workdir = tmp_path_factory.mktemp(f"sequence_{method}")
      config = _sequence_config(method)
      runs[method] = (config, loop.train_and_evaluate(config, str(workdir)), workdir)
    return runs[method]

  return get


@pytest.fixture(scope="module")
def ppca_run(tmp_path_factory):
  """(config, result, workdir) of a 2 x 30-step run with PPCA task inference at 3
  components, shared by the tests that read it (each restores a copy)."""
  workdir = tmp_path_factory.mktemp("ppca_run")
  config = _config(steps=30, **{"continual.task_inference": "ppca",
                                "continual.ppca_components": 3, "eval_batch_size": 1000})
  return config, loop.train_and_evaluate(config, str(workdir)), workdir


@pytest.mark.parametrize("beta", [0.0, 1000.0])
def test_output_regularizer_keeps_task_0_weights(tmp_path, beta):
  """After task 1, the weights generated for task 0 stay within 1% (relative) of those
  stored at the end of task 0 with beta = 1000, and move by more than 10% with beta = 0."""
  config = _config(**{"continual.beta": beta, "optim.lr": 3e-3})
  result = loop.train_and_evaluate(config, str(tmp_path))
  task = _restored(config, tmp_path).task
  # Targets stored at the end of task 0 are kept in the checkpoint (the end of task 1
  # stores again; read task 0's row as saved at step 40 instead).
  reader = tf.train.load_checkpoint(str(tmp_path / "checkpoints" / "ckpt-40"))
  name = [n for n, _ in tf.train.list_variables(str(tmp_path / "checkpoints" / "ckpt-40"))
          if n.startswith("continual/targets/")][0]
  stored0 = reader.get_tensor(name)[0]
  now0 = regularizers.flatten_weights(task.hnet(0), task.hnet.paths).numpy()
  change = np.linalg.norm(now0 - stored0) / np.linalg.norm(stored0)
  if beta:
    assert change < 0.01, change
  else:
    assert change > 0.1, change
  assert len(result["cl1/matrix"]) == 2 and result["cl1/matrix"][0][0] > 0.9


@pytest.mark.parametrize("refresh", [True, False])
def test_refresh_targets_and_per_task_schedule(tmp_path, refresh):
  """4 tasks x 20 steps; targets are stored after tasks 0, 1 and 2 (steps 20, 40, 60).
  ``refresh_targets=False``: after task 2, row 0 is exactly the row stored after task 0
  and row 1 the row stored after task 1. ``True`` (the paper): both are stored again, so
  they differ. A cosine schedule spans one task: at the end of the last task (Adam's
  count restarted at 60, now 20) the learning rate is 0, not the 0.85 x lr of an
  80-step horizon."""
  config = _config(steps=20, tasks=4, **{"continual.beta": 0.01, "optim.lr": 3e-3,
                                         "optim.schedule": "cosine",
                                         "continual.refresh_targets": refresh,
                                         "checkpoint_every": 20, "checkpoint_keep": 4})
  loop.train_and_evaluate(config, str(tmp_path))
  trainer = _restored(config, tmp_path)

  def targets(step):
    path = str(tmp_path / "checkpoints" / f"ckpt-{step}")
    name = [n for n, _ in tf.train.list_variables(path) if n.startswith("continual/targets/")]
    return tf.train.load_checkpoint(path).get_tensor(name[0])

  after0, after1, after2 = targets(20), targets(40), targets(60)
  for row, first in ((0, after0), (1, after1)):
    if refresh:
      assert not np.array_equal(after2[row], first[row]), row
    else:
      np.testing.assert_array_equal(after2[row], first[row])
  assert int(trainer.optimizer.iterations.numpy()) == 20
  assert float(trainer.optimizer.learning_rate.numpy()) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("method", ["hnet", "independent"])
def test_resume_inside_the_sequence_equals_uninterrupted(tmp_path, method, sequence_runs):
  """Stopped inside task 2 (step 50 of 3 x 20), rerun to the end: same checkpoint values,
  same accuracy matrices (the stored targets of tasks 0 and 1, or the stored networks
  and the one in training, came back intact)."""
  full, straight, a = sequence_runs(method)
  part = _sequence_config(method, num_steps=50)
  loop.train_and_evaluate(part, str(tmp_path / "b"))
  resumed = loop.train_and_evaluate(full, str(tmp_path / "b"))
  for key in ("cl1/matrix", "cl3/matrix"):
    np.testing.assert_allclose(resumed[key], straight[key], atol=1e-6)
  ra = tf.train.load_checkpoint(str(a / "checkpoints"))
  rb = tf.train.load_checkpoint(str(tmp_path / "b" / "checkpoints"))
  for n, _ in tf.train.list_variables(str(a / "checkpoints")):
    if n.startswith(("save_counter", "_CHECKPOINTABLE")):
      continue
    np.testing.assert_allclose(ra.get_tensor(n), rb.get_tensor(n), rtol=1e-5, atol=1e-6,
                               err_msg=n)


def test_optimizer_reset_is_a_fresh_adam():
  """After the reset between tasks, Adam's next step equals a fresh Adam's first step
  (moments and iteration count zeroed, so the bias correction applies again): exactly
  ``lr * sign(g)`` up to epsilon, not the ~3x of zeroed moments under an old count."""
  import keras  # pylint: disable=g-import-not-at-top
  var = tf.Variable([1.0, -2.0])
  opt = keras.optimizers.Adam(learning_rate=0.01)
  for _ in range(600):
    opt.apply_gradients([(tf.constant([0.3, -0.1]), var)])
  continual_learning._reset_optimizer_slots(opt)  # pylint: disable=protected-access
  assert int(opt.iterations.numpy()) == 0
  before = var.numpy().copy()
  opt.apply_gradients([(tf.constant([0.5, -4.0]), var)])
  np.testing.assert_allclose(var.numpy() - before, [-0.01, 0.01], rtol=1e-4)
  assert opt.learning_rate.numpy() == pytest.approx(0.01)


def test_lookahead_and_subset_variants_protect_task_0(tmp_path):
  config = _config(**{"continual.beta": 1000.0, "continual.lookahead": True,
                      "continual.past_tasks_per_step": 1, "optim.lr": 3e-3})
  result = loop.train_and_evaluate(config, str(tmp_path))
  matrix = np.array(result["cl1/matrix"])
  assert matrix[1, 0] >= matrix[0, 0] - 0.02, matrix     # task 0 not forgotten


@pytest.mark.parametrize("method", ["finetune", "ewc", "independent"])
def test_baselines_run_in_the_same_loop(tmp_path, method):
  result = loop.train_and_evaluate(_config(method=method, steps=30), str(tmp_path))
  matrix = np.array(result["cl1/matrix"])
  assert matrix.shape == (2, 2) and matrix[1, 1] > 0.9
  with open(tmp_path / "final_metrics.json") as f:
    assert json.load(f)["cl1/forgetting"] == pytest.approx(result["cl1/forgetting"])


def test_independent_networks_optimiser_steps_one_network(tmp_path, sequence_runs):
  """The independent networks' optimiser holds and updates one network (the task's
  working set), not all T: Adam's two moments are 2 x one target, where a [T, ...] table
  of trainable sets gave 2 x T x one target and a dense update of every set each step.
  Each task's network is still its own: after the sequence, weights(t) and the batched
  weights(range(T)) give the set stored at the end of task t (the checkpoint after it),
  untouched by the later tasks, and the reported counts are the T sets."""
  T, steps = 3, 20
  config, _, workdir = sequence_runs("independent")   # 3 tasks x 20 steps
  trainer = _restored(config, _copy_of(workdir, tmp_path))
  task = trainer.task
  size = lambda vs: int(sum(np.prod(v.shape) for v in vs))
  one = size(task.target.trainable_variables)
  assert size(task.trainable_variables) == one
  moments = [v for v in trainer.optimizer.variables
             if len(v.shape) and tf.as_dtype(v.dtype).is_floating]
  assert size(moments) == 2 * one, [v.shape for v in moments]
  assert task.source.parameter_counts()["trainable"] == T * one
  batched = task.source.weights(tf.range(T))
  for t in range(T):   # The checkpoint written at the end of task t (after its event).
    path = str(tmp_path / "checkpoints" / f"ckpt-{(t + 1) * steps}")
    names = sorted(n for n, _ in tf.train.list_variables(path)
                   if n.startswith("independent_sets/") and "OPTIMIZER" not in n)
    assert len(names) == len(task.source.generated_paths)
    own = task.source.weights(tf.constant(t))
    for n, p in zip(names, task.source.generated_paths):
      stored = tf.train.load_checkpoint(path).get_tensor(n)[t]
      np.testing.assert_array_equal(own[p].numpy(), stored, err_msg=p)
      np.testing.assert_array_equal(batched[p][t].numpy(), stored, err_msg=p)
      if t:   # Trained in its task: not the row the checkpoint before the task held.
        before = tf.train.load_checkpoint(str(tmp_path / "checkpoints" / f"ckpt-{t * steps}"))
        assert not np.array_equal(before.get_tensor(n)[t], stored), p


def test_ewc_fisher_is_traced_once_for_the_sequence(monkeypatch):
  """EWC's Fisher pass after each task is one traced function for the whole sequence
  (the task a tensor), not a new ``tf.function`` per task, which retraced the Fisher
  graph after every task and made TensorFlow warn of excessive retracing; each task's
  Fisher is still that task's head's, as computed eagerly."""
  traces = []
  fisher = regularizers.diagonal_fisher
  monkeypatch.setattr(regularizers, "diagonal_fisher",
                      lambda *a, **k: traces.append(1) or fisher(*a, **k))
  task = continual_learning.ContinualTask(   # 100 < every task's size: one shape
      _config(method="ewc", tasks=4, **{"continual.fisher_samples": 100}))
  params = task.source.trainable_variables
  for done in range(3):
    before = [f.numpy() for f in task.state.fisher]
    task._prepare_next_task(done)   # pylint: disable=protected-access
    n = min(int(task.config.continual.fisher_samples), len(task.tasks[done].x_train))
    idx = np.random.default_rng([task.config.seed, done]).choice(
        len(task.tasks[done].x_train), n, replace=False)
    data = task.tasks[done]
    x = tf.constant(data.x_train[idx].astype(np.float32) * data.pixel_scale)
    y = tf.constant(data.y_train[idx].astype(np.int32))

    def log_likelihood(xb, yb, t=done):
      logits = tf.reshape(task.target(xb, training=False), [-1, 4, task.classes])[:, t]
      return -tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))

    expected = fisher(log_likelihood, params, x, y)
    gamma = float(task.config.continual.ewc_gamma)
    for f_var, f_old, f_new in zip(task.state.fisher, before, expected):
      np.testing.assert_allclose(f_var.numpy(), gamma * f_old + f_new.numpy(),
                                 rtol=1e-4, atol=1e-10)
  assert len(traces) == 1   # the old code traced once per task: 3


@pytest.mark.parametrize("method", ["hnet", "finetune"])
def test_kernel_l2_penalises_the_weights_used(method):
  """``config.model.kernel_l2 = c`` adds ``c * sum(w**2)`` over the target's kernels, the
  ones generated for the batch's task under ``hnet`` (the target's own under
  ``finetune``), to the training loss, and logs it as ``regularization_loss``."""
  from hypernet.core import functional  # pylint: disable=g-import-not-at-top
  c = 1e-2
  task = continual_learning.ContinualTask(_config(method=method, **{"model.kernel_l2": c}))
  assert "regularization_loss" in task.metric_names
  data = task.tasks[1]
  x = tf.constant(data.x_train[:16], tf.float32) * data.pixel_scale
  y = tf.constant(data.y_train[:16], tf.int32)
  batch = {"image": x, "label": y, "task": tf.constant(1), "step": tf.constant(50)}
  loss, sums, _ = task.train_loss(batch, 16)
  weights = (task.source.weights(tf.constant(1)) if method == "hnet" else
             functional.variable_paths(task.target))
  l2 = c * sum(float(tf.reduce_sum(tf.square(w))) for p, w in weights.items()
               if p.endswith("kernel"))
  assert l2 > 0
  if method == "hnet":   # the target on task 1's generated weights
    logits = functional.functional_call(task.target, weights, x, training=True)
  else:                  # task 1's head of the multi-head target
    logits = tf.reshape(task.target(x, training=True), [16, 2, -1])[:, 1]
  ce = float(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)))
  penalty = float(task.penalty(tf.constant(1), tf.constant(50)))
  assert float(sums["regularization_loss"][0]) == pytest.approx(l2, rel=1e-5)
  assert float(loss) == pytest.approx(ce + l2 + penalty, rel=1e-5)


def test_bad_ppca_components_is_a_config_error(tmp_path):
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  config = _config(**{"continual.task_inference": "ppca", "continual.ppca_components": 0})
  with pytest.raises(config_lib.ConfigError, match=r"ppca_components must be a positive"):
    config_lib.validate(config)
  config = _config(**{"continual.task_inference": "ppca", "continual.ppca_components": 64})
  with pytest.raises(config_lib.ConfigError, match=r"ppca_components=64 must be in \[1, 64\)"):
    continual_learning.ContinualTask(config)


def test_bad_continual_config_names_the_field(tmp_path):
  with pytest.raises(ValueError, match=r"config\.num_steps=999 is more than config\.continual\."
                                       r"num_tasks \* steps_per_task = 2 \* 40 = 80"):
    loop.train_and_evaluate(_config(**{"num_steps": 999}), str(tmp_path))


def test_ppca_log_likelihood_is_the_gaussian_density_of_its_covariance():
  """Tipping & Bishop's closed form against the dense Gaussian log-density with
  C = U_r (Lambda_r - sigma^2 I) U_r^T + sigma^2 I (float64), and the fit's sigma^2 is
  the mean of the discarded eigenvalues; a task's fit holds one float64 copy of its
  images."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import tracemalloc  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  d, r = 12, 3
  x = rng.normal(size=(400, d)) @ rng.normal(size=(d, d)) * 0.3 + rng.normal(size=d)
  mean, basis, scales, noise = task_inference.ppca_fit(x, r)
  eig = np.sort(np.linalg.eigvalsh(np.cov(x.T, bias=True)))[::-1]
  np.testing.assert_allclose(scales, eig[:r], rtol=1e-10)
  assert noise == pytest.approx(eig[r:].mean(), rel=1e-10)
  cov = basis.T @ np.diag(scales - noise) @ basis + noise * np.eye(d)
  test = rng.normal(size=(7, d)) * 2
  centred = test - mean
  dense = -0.5 * (d * np.log(2 * np.pi) + np.linalg.slogdet(cov)[1]
                  + np.einsum("bi,ij,bj->b", centred, np.linalg.inv(cov), centred))
  ours = task_inference.ppca_log_likelihood(tf.constant(test), *[
      tf.constant(np.asarray(a)) for a in (mean, basis, scales, noise)]).numpy()
  np.testing.assert_allclose(ours, dense, rtol=1e-10)
  stacked = task_inference.ppca_log_likelihood(tf.constant(test), *[
      tf.constant(np.stack([np.asarray(a)] * 2)) for a in (mean, basis, scales, noise)])
  np.testing.assert_allclose(stacked.numpy(), [dense, dense], rtol=1e-10)
  with pytest.raises(ValueError, match="components=12 must be an integer in"):
    task_inference.ppca_fit(x, d)
  with pytest.raises(ValueError, match="needs more examples than components"):
    task_inference.ppca_fit(x[:3], r)
  # The fit's values go straight in (a float noise, float64 arrays); constant inputs
  # (zero variance everywhere) give a finite density, highest at the mean.
  fit = task_inference.ppca_fit(np.zeros((10, d), np.uint8), r)
  dens = task_inference.ppca_log_likelihood(np.stack([np.zeros(d), np.ones(d)]), *fit)
  assert np.all(np.isfinite(dens.numpy())) and dens[0] > dens[1]
  # A task's input density (ContinualTask._fit_density) is fitted on one float64 copy of
  # its training images, scaled and then centred in place (the fit held three at once,
  # the cast, the scaled and the centred copy: 1.1 GB for a 60,000-image MNIST task), to
  # the same values bit for bit; ppca_fit leaves a float64 array it is given as it was
  # unless told to overwrite it.
  task = continual_learning.ContinualTask(_config())
  images = np.random.default_rng(0).integers(0, 17, size=(20000, 8, 8, 1), dtype=np.uint8)
  task.tasks[0] = dataclasses.replace(task.tasks[0], x_train=images,
                                      y_train=np.zeros(len(images), np.int32))
  tracemalloc.start()
  try:
    task._fit_density(0)  # pylint: disable=protected-access
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  assert peak < 1.5 * images.size * 8, peak / (images.size * 8)   # the old fit: >= 2
  scaled = images.reshape(len(images), -1).astype(np.float64) * task.tasks[0].pixel_scale
  components = int(task.config.continual.ppca_components)
  given = scaled.copy()
  task_fit = task_inference.ppca_fit(given, components)
  np.testing.assert_array_equal(given, scaled)
  centred = scaled - scaled.mean(0)   # the plain formula
  eigenvalues = np.linalg.eigh(centred.T @ centred / len(scaled))[0][::-1]
  np.testing.assert_array_equal(task_fit[2], eigenvalues[:components])
  for a, b, stored in zip(task_fit, task_inference.ppca_fit(given, components, overwrite_x=True),
                          (task.state.ppca_mean, task.state.ppca_basis, task.state.ppca_scales,
                           task.state.ppca_noise)):
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(stored[0].numpy(), tf.cast(a, stored.dtype).numpy())


@pytest.mark.parametrize("inference", ["entropy", "ppca"])
def test_final_evaluation_infers_among_every_task(tmp_path, inference, request):
  """The loop's last evaluation runs after the end-of-task event (which fits the last
  task's density for ppca): its CL1 / CL3 accuracies are the means of the matrices' last
  rows (equal-sized test sets), and the last task is one of the CL3 choices (ppca: the
  run of test_cl3_scores_script_reproduces_the_runs_cl3)."""
  if inference == "ppca":
    _, result, _ = request.getfixturevalue("ppca_run")
  else:
    config = _config(steps=30, **{"continual.task_inference": inference,
                                  "eval_batch_size": 1000})
    result = loop.train_and_evaluate(config, str(tmp_path))
  assert result["cl3_accuracy"] == pytest.approx(result["cl3/final_accuracy"], abs=1e-6)
  assert result["accuracy"] == pytest.approx(result["cl1/final_accuracy"], abs=1e-6)
  last = np.array(result["cl3/matrix"])[-1]
  assert last[1] > 0, result["cl3/matrix"]   # an unseen task would score exactly 0


def test_ppca_task_inference_on_split_fashion_mnist(tmp_path):
  """Split Fashion-MNIST, 3 tasks: the per-task input densities pick the task of most
  test images ({T-shirt, trouser}, {pullover, dress}, {coat, sandal}), so CL3 is far
  above entropy's on the same weights; the densities come back from the checkpoint."""
  data_dir = os.path.join(REPO, "..", "shared", "data", "fashion-mnist")
  if not os.path.isdir(data_dir):
    pytest.skip("needs ../shared/data/fashion-mnist")
  config = _config(steps=100, tasks=3, **{"continual.task_inference": "ppca",
                                          "data.name": "fashion_mnist",
                                          "data.data_dir": data_dir,
                                          "continual.eval_examples_per_task": 1000,
                                          "eval_batch_size": 1000})
  result = loop.train_and_evaluate(config, str(tmp_path))
  assert result["params/task_density_floats_per_task"] == 784 * 21 + 21
  trainer = _restored(config, tmp_path)
  task = trainer.task
  x = np.concatenate([d.x_test[:1000] for d in task.eval_tasks]).astype(np.float32) / 255
  truth = np.repeat(np.arange(3), 1000)
  picked, _ = task._infer_task(tf.constant(x))  # pylint: disable=protected-access
  ppca = float(np.mean(picked.numpy() == truth))
  assert ppca == pytest.approx(result["cl3_accuracy"] / result["accuracy"], abs=0.05)
  assert ppca > 0.8, ppca
  config.continual.task_inference = "entropy"
  picked, _ = continual_learning.ContinualTask._infer_task(task, tf.constant(x))  # pylint: disable=protected-access
  entropy = float(np.mean(picked.numpy() == truth))
  assert ppca > entropy + 0.2, (ppca, entropy)


def test_cl3_scores_script_reproduces_the_runs_cl3(tmp_path, ppca_run):
  """experiments/cl3_scores.py on a finished digits run: its per-task PPCA row at the
  run's components gives the run's own CL3 accuracy (same fit, same test images), and
  the raw entropy row the CL3 of the same weights under task_inference='entropy'."""
  import subprocess  # pylint: disable=g-import-not-at-top
  _, result, workdir = ppca_run
  _copy_of(workdir, tmp_path)
  entropy = _config(steps=30, **{"continual.task_inference": "entropy",
                                 "eval_batch_size": 1000})
  entropy_cl3 = loop.Trainer(entropy, str(tmp_path))
  entropy_cl3.restore()
  entropy_cl3.task.state.current.assign(1)
  ent = entropy_cl3.evaluate()["cl3_accuracy"]
  env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
  out = subprocess.run([sys.executable, "-m", "experiments.cl3_scores",
                        f"--workdir={tmp_path}", "--components=3", "--examples=100000",
                        "--train_examples=200"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  rows = {l.split("|")[1].strip(): float(l.split("|")[3]) for l in out.stdout.splitlines()
          if l.startswith("| ") and "---" not in l and "task found by" not in l}
  assert rows["PPCA per task, 3 components"] == pytest.approx(
      100 * result["cl3_accuracy"], abs=0.01), out.stdout
  assert rows["neg_entropy, raw"] == pytest.approx(100 * ent, abs=0.01), out.stdout


@pytest.mark.parametrize("name", ["split_fmnist_hnet", "permuted_fmnist_hnet"])
def test_committed_fashion_mnist_configs_run(tmp_path, name):
  """Smoke run of the committed config as it is (its hypernetwork, regulariser, PPCA task
  inference) on the real data: 2 tasks x 3 steps, 200 test images per task."""
  data_dir = os.path.join(REPO, "..", "shared", "data", "fashion-mnist")
  if not os.path.isdir(data_dir):
    pytest.skip("needs ../shared/data/fashion-mnist")
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  config = config_lib.load_config_file(os.path.join(REPO, "configs", f"{name}.py"))
  config.data.data_dir = data_dir
  config.continual.num_tasks = 2
  config.continual.steps_per_task = 3
  config.continual.eval_examples_per_task = 200
  config.num_steps = 6
  config.log_every = config.checkpoint_every = 3
  result = loop.train_and_evaluate(config, str(tmp_path))
  assert np.array(result["cl3/matrix"]).shape == (2, 2)
  assert result["params/task_density_floats_per_task"] == 784 * 21 + 21
  if name.startswith("permuted"):   # The hypernetwork is smaller than one target.
    assert result["params/compression_ratio"] > 1.2, result["params/compression_ratio"]
  assert 0.0 <= result["cl3_accuracy"] <= result["accuracy"] + 1e-6
