"""TensorBoard depth: model summaries hold the right values, and a real TensorBoard
serves the scalars, histograms, images and hparams through its HTTP data endpoints."""
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from hypernet import config_lib
from hypernet.training import summaries, loop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "configs"))
import digits_hyper  # noqa: E402  pylint: disable=g-import-not-at-top
import split_fmnist_hnet  # noqa: E402  pylint: disable=g-import-not-at-top


def _config():
  c = digits_hyper.get_config()
  c.num_steps = 40
  c.log_every = 10
  c.eval_every = 20
  c.checkpoint_every = 20
  c.checkpoint_keep = 5
  c.optim.schedule = "constant"
  c.summaries.every = 20
  c.summaries.profile_start = 10
  c.summaries.profile_steps = 2
  return c


# Session scope (the run is only read): its slow readers run first (tests/conftest.py
# orders slow tests first) and the others after other files' tests; a module fixture
# would train it again for them.
@pytest.fixture(scope="session")
def run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("summaries") / "digits_run"  # Alone in its parent.
  result = loop.train_and_evaluate(_config(), str(workdir))
  return workdir, result


def _events(logdir):
  """``{tag: {step: tensor value}}`` of every summary in a run folder."""
  out = {}
  for path in tf.io.gfile.glob(os.path.join(logdir, "events.out.tfevents.*")):
    for e in tf.compat.v1.train.summary_iterator(path):
      for v in e.summary.value:
        out.setdefault(v.tag, {})[e.step] = tf.make_ndarray(v.tensor)
  return out


def _restored(workdir, step):
  trainer = loop.Trainer(_config(), str(workdir))
  trainer.checkpoint.restore(os.path.join(workdir, "checkpoints", f"ckpt-{step}")
                             ).assert_existing_objects_matched()
  return trainer


def test_kernel_grid_draws_each_filter_scaled_by_its_peak():
  k = np.zeros((3, 3, 1, 2), np.float32)
  k[:, :, 0, 0] = np.arange(9).reshape(3, 3) - 4.0  # peak |w| = 4
  k[:, :, 0, 1] = -2.0
  grid = summaries.kernel_grid(k, scale=2, gap=1)
  assert grid.shape == (1 * 7 + 1, 2 * 7 + 1, 1)  # 1 row, 2 columns of 6x6 + 1px lines
  assert grid[0].min() == grid[:, 0].min() == grid[:, 7].min() == 1.0  # white lines
  np.testing.assert_allclose(grid[1:7:2, 1:7:2, 0], 0.5 + 0.5 * k[:, :, 0, 0] / 4.0)
  np.testing.assert_array_equal(grid[1:7, 8:14], 0.0)  # -2 / peak 2 -> black
  rgb = summaries.kernel_grid(np.ones((5, 5, 3, 7)), max_filters=4)
  assert rgb.shape[-1] == 3 and rgb.shape == (1 * (30 + 2) + 2, 4 * (30 + 2) + 2, 3)
  with pytest.raises(ValueError, match=r"kernel must be \[kh, kw, in, out\]"):
    summaries.kernel_grid(np.ones((3, 3, 4)))


def test_kernel_grid_fits_a_tensorboard_card():
  """32 3x3 filters (the digits conv1): 30-pixel filters, 4 balanced rows of 8, no wider
  than max_width; each filter keeps its own scale (a tiny filter is not washed out)."""
  rng = np.random.default_rng(0)
  k = rng.normal(size=(3, 3, 1, 32)).astype(np.float32)
  k[..., 5] *= 1e-3
  grid = summaries.kernel_grid(k)
  assert grid.shape == (4 * 32 + 2, 8 * 32 + 2, 1) and grid.shape[1] <= 320
  cell = grid[2:32, 2 + 5 * 32: 2 + 5 * 32 + 30, 0]  # Filter 5, enlarged 10x.
  np.testing.assert_allclose(cell[::10, ::10], 0.5 + 0.5 * k[..., 0, 5] / np.abs(k[..., 5]).max(),
                             rtol=1e-6)
  assert summaries.kernel_grid(np.ones((3, 3, 1, 100)), max_width=100).shape[1] <= 100


def test_model_summaries_hold_the_values_of_the_checkpointed_run(run):
  workdir, _ = run
  train = _events(workdir / "train")
  paths = ["conv1/kernel", "conv1/bias", "conv2/kernel", "conv2/bias", "dense1/kernel",
           "dense1/bias", "head/kernel", "head/bias"]
  for p in paths:
    assert sorted(train[f"weights/generated/{p}"]) == [0, 20, 40]
  assert sorted(train["weights/embeddings/hypernetwork/chunk_embeddings"]) == [0, 20, 40]
  trainer20, trainer40 = _restored(workdir, 20), _restored(workdir, 40)
  generated = {p: t.numpy() for p, t in trainer40.task.source.hypernetwork().items()}
  for p in paths:  # A histogram counts every element; the norm is the tensor's.
    assert train[f"weights/generated/{p}"][40][:, 2].sum() == generated[p].size
    np.testing.assert_allclose(train[f"weights/norm/generated/{p}"][40], np.linalg.norm(generated[p]),
                               rtol=1e-5)
  # Updates: the change of each variable between the summaries at steps 20 and 40.
  for v20, v40 in zip(trainer20.variables, trainer40.variables):
    delta = np.linalg.norm(v40.numpy() - v20.numpy())
    np.testing.assert_allclose(train[f"weights/update_norm/{v40.path}"][40], delta, rtol=1e-5)
  assert sorted(train["weights/update_norm/hypernetwork/chunk_embeddings"]) == [20, 40]  # none at 0
  # Gradients: of the training loss on the batch of step 41 at the step-40 parameters.
  task = trainer40.task
  batch = next(iter(task.train_dataset(64, 0, 40).take(1)))
  with tf.GradientTape() as tape:
    loss, _, _ = task.train_loss(batch, 64)
  for g, v in zip(tape.gradient(loss, trainer40.variables), trainer40.variables):
    np.testing.assert_allclose(train[f"weights/grad_norm/{v.path}"][40], np.linalg.norm(g.numpy()),
                               rtol=1e-4)
  # The first conv kernel drawn as a filter grid (PNG-encoded, 8 bits per channel).
  png = train["weights/kernels/conv1/kernel"][40][2]
  image = np.asarray(Image.open(io.BytesIO(png)), np.float32) / 255.0
  expected = summaries.kernel_grid(generated["conv1/kernel"])
  assert image.shape[:2] == expected.shape[:2]
  np.testing.assert_allclose(image.reshape(expected.shape), expected, atol=1 / 255 + 1e-6)


def test_profiler_trace_and_run_scalars_are_written(run):
  workdir, result = run
  traces = tf.io.gfile.glob(str(workdir / "train" / "plugins" / "profile" / "*" / "*.xplane.pb"))
  assert len(traces) == 1 and os.path.getsize(traces[0]) > 0
  train = summaries.read_scalars(str(workdir / "train"))
  assert [s for s, _ in train["speed/examples_per_sec"]] == [10, 20, 30, 40]
  assert all(v > 0 for _, v in train["speed/examples_per_sec"])
  # Nothing in the workdir itself (no run "."); counts and final metrics are text, not
  # one-point charts; eval also at step 0.
  assert not tf.io.gfile.glob(str(workdir / "events.out.tfevents.*"))
  eval_scalars = summaries.read_scalars(str(workdir / "eval"))
  assert [s for s, _ in eval_scalars["accuracy"]] == [0, 20, 40]
  assert eval_scalars["accuracy"][-1][1] == pytest.approx(result["accuracy"], abs=1e-6)
  assert not any(t.startswith(("params/", "final/")) for t in list(train) + list(eval_scalars))
  texts = {**_events(workdir / "train"), **_events(workdir / "eval")}
  assert f"| trainable | {result['params/trainable']:,} |" in texts["parameters"][0].item().decode()
  assert f"| accuracy | {100 * result['accuracy']:.2f}% |" in \
      texts["final_metrics"][40].item().decode()


def test_hparams_are_the_fields_the_run_uses():
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  import omniglot_maml  # pylint: disable=g-import-not-at-top
  hyper = config_lib.hparams(digits_hyper.get_config())
  assert list(hyper)[:6] == ["optim.lr", "hypernet.kind", "hypernet.chunk_size", "batch_size",
                             "num_steps", "seed"]
  assert hyper["hypernet.chunk_size"] == 1024 and hyper["model.conv_widths"] == "(32, 64)"
  assert not [k for k in hyper if k.startswith(("meta.", "summaries.", "fault.", "multitask."))]
  assert not {"data.omniglot_zips", "data.rotations", "hypernet.z_dim", "model.alpha",
              "optim.momentum", "optim.weight_decay", "jit_compile"} & set(hyper)
  assert {"hypernet.emb_multiplier", "hypernet.head_multiplier",
          "hypernet.head_precondition", "hypernet.activation",
          "hypernet.output_major"} <= set(hyper)
  # The classification pipeline's distortions (data.augment_*) are the run's fields too.
  assert {"data.augment_rotation", "data.augment_scale", "data.augment_shear"} <= set(hyper)
  assert len(hyper) == 41 < len(config_lib.flatten(digits_hyper.get_config()))  # all fields
  assert "hypernet.condition_per_chunk" not in hyper     # unconditional: unused
  continual = config_lib.hparams(config_lib.load_config_file(
      os.path.join(os.path.dirname(digits_hyper.__file__), "permuted_fmnist_hnet.py")))
  assert {"hypernet.condition_dim", "hypernet.condition_per_chunk"} <= set(continual)
  meta = config_lib.hparams(omniglot_maml.get_config())
  assert {"meta.inner_lr", "meta.num_ways", "data.omniglot_zips", "meta.zero_init",
          "meta.within_alphabet", "meta.first_order"} <= set(meta)   # MAML's arguments.
  assert not {"hypernet.chunk_size", "data.test_fraction", "meta.mlp_widths",
              "meta.generator_widths", "meta.head", "meta.proximal_lambda"} & set(meta)
  generated = config_lib.hparams(_with_learner(omniglot_maml.get_config(), "support_hypernet"))
  assert {"meta.generator_widths", "meta.scale", "meta.head"} <= set(generated)
  assert "meta.zero_init" not in generated


def _with_learner(config, learner):
  config.meta.learner = learner
  return config


def test_crash_resume_writes_each_step_once(tmp_path, monkeypatch):
  """Checkpoints every 50; the job dies at step 140 (latest checkpoint 100) after its
  events reached the disk; the rerun to 200 logs 120 and 140 again. A restart marker at
  step 101 makes TensorBoard's own loader and read_scalars drop the orphaned points."""
  from tensorboard.backend.event_processing import plugin_event_accumulator  # pylint: disable=g-import-not-at-top
  c = _config()
  c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 200, 20, 40, 50
  c.summaries.every, c.summaries.profile_steps = 0, 0
  original = summaries.Writer.scalars

  def crash_at_140(self, step, values, split="train"):
    original(self, step, values, split)
    if step == 140 and split == "train":
      self.flush()
      raise RuntimeError("killed")

  monkeypatch.setattr(summaries.Writer, "scalars", crash_at_140)
  with pytest.raises(RuntimeError, match="killed"):
    loop.train_and_evaluate(c, str(tmp_path))
  monkeypatch.setattr(summaries.Writer, "scalars", original)
  assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-100")
  # Event files are named events.out.tfevents.<unix second>.<host>.<pid>.<writer count>:
  # two runs in one second of one process sort by the count as a string ("10" < "9"),
  # and TensorBoard reads them in that order. A real restart is a new process in a
  # later second; so is this one.
  time.sleep(1.05 - time.time() % 1)
  loop.train_and_evaluate(c, str(tmp_path))
  raw = [e.step for f in sorted(tf.io.gfile.glob(str(tmp_path / "train" / "events*")))
         for e in tf.compat.v1.train.summary_iterator(f)
         for v in e.summary.value if v.tag == "loss"]
  assert raw == list(range(20, 141, 20)) + list(range(120, 201, 20))  # Orphans on disk.
  for run, tag, steps in (("train", "loss", range(20, 201, 20)),
                          ("eval", "accuracy", range(0, 201, 40))):
    assert [s for s, _ in summaries.read_scalars(str(tmp_path / run))[tag]] == list(steps)
    accumulator = plugin_event_accumulator.EventAccumulator(str(tmp_path / run))
    accumulator.Reload()
    assert [e.step for e in accumulator.Tensors(tag)] == list(steps), run


class _TensorBoard:
  """``tensorboard --logdir`` on 127.0.0.1 and a free port, as a subprocess."""

  def __init__(self, logdir, timeout=120):
    self.proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", f"--logdir={logdir}", "--host=127.0.0.1",
         "--port=0", "--load_fast=false", "--reload_interval=2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    self.lines = []
    threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()
    deadline = time.time() + timeout
    self.url = None
    while self.url is None:
      m = re.search(r"at (http://127\.0\.0\.1:\d+)/", "".join(self.lines))
      if m:
        self.url = m.group(1)
      elif time.time() > deadline or self.proc.poll() is not None:
        self.close()
        raise AssertionError("TensorBoard did not start:\n" + "".join(self.lines)[-3000:])
      time.sleep(0.2)

  def get(self, route, **params):
    url = f"{self.url}/{route}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=30) as r:
      body = r.read()
    return body if "individualImage" in route else json.loads(body)

  def post(self, route, payload):
    request = urllib.request.Request(
        f"{self.url}/{route}", data=json.dumps(payload).encode(), method="POST",
        headers={"Content-Type": "application/json", "X-XSRF-Protected": "1"})
    with urllib.request.urlopen(request, timeout=30) as r:
      return json.loads(r.read())

  def wait_for(self, predicate, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
      if predicate():
        return
      time.sleep(0.5)
    raise AssertionError("TensorBoard never served the data")

  def close(self):
    if self.proc.poll() is None:
      self.proc.terminate()
      try:
        self.proc.wait(20)
      except subprocess.TimeoutExpired:
        self.proc.kill()


def _hparams_table(tb):
  """The HParams tab's table as its frontend fetches it: metric columns and sessions."""
  experiment = tb.post("data/plugin/hparams/experiment", {"experimentName": ""})
  groups = tb.post("data/plugin/hparams/session_groups", {
      "experimentName": "", "startIndex": 0, "sliceSize": 10,
      "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                          "STATUS_RUNNING"], "colParams": []})["sessionGroups"]
  return experiment, groups


@pytest.fixture(scope="module")
def workdir_tensorboard(run):
  """One ``tensorboard --logdir=WORKDIR`` (the README's command) for the tests below that
  read what it serves, instead of a start (~7 s on 2 busy cores) each: the run is
  finished and each test still waits for the data it reads."""
  tb = _TensorBoard(run[0])
  yield tb
  tb.close()


@pytest.mark.slow
def test_tensorboard_serves_scalars_histograms_images_and_hparams(run, workdir_tensorboard):
  workdir, result = run
  tb = workdir_tensorboard
  tb.wait_for(lambda: "eval" in tb.get("data/plugin/scalars/tags"))
  assert set(tb.get("data/runs")) == {"train", "eval"}  # No run named ".".
  loss = tb.get("data/plugin/scalars/scalars", run="train", tag="loss")
  assert [step for _, step, _ in loss] == [10, 20, 30, 40]
  accuracy = tb.get("data/plugin/scalars/scalars", run="eval", tag="accuracy")
  assert [step for _, step, _ in accuracy] == [0, 20, 40]
  assert accuracy[-1][2] == pytest.approx(result["accuracy"], abs=1e-6)

  histograms = tb.get("data/plugin/histograms/histograms", run="train",
                      tag="weights/generated/conv2/kernel")
  assert [step for _, step, _ in histograms] == [0, 20, 40]
  assert sum(count for _, _, count in histograms[-1][2]) == 3 * 3 * 32 * 64
  assert "weights/embeddings/hypernetwork/chunk_embeddings" in \
      tb.get("data/plugin/histograms/tags")["train"]

  images = tb.get("data/plugin/images/images", run="train", tag="weights/kernels/conv1/kernel",
                  sample=0)
  assert [im["step"] for im in images] == [0, 20, 40]
  png = tb.get("data/plugin/images/individualImage" + "?" + images[-1]["query"])
  assert png.startswith(b"\x89PNG\r\n\x1a\n")
  # 32 filters of 3x3, each 30x30 pixels, in 4 rows of 8: fits a card.
  assert Image.open(io.BytesIO(png)).size == (8 * 32 + 2, 4 * 32 + 2)
  text_tags = tb.get("data/plugin/text/tags")
  assert "final_metrics" in text_tags["eval"] and "parameters" in text_tags["train"]


@pytest.mark.slow
def test_hparams_table_is_filled_for_the_workdir_and_its_parent(run, workdir_tensorboard):
  """``tensorboard --logdir=WORKDIR`` (the README's command) and ``--logdir=PARENT``: every
  metric column of the HParams table has the run's value."""
  workdir, result = run
  for logdir, session in ((workdir, "eval"), (workdir.parent, f"{workdir.name}/eval")):
    tb = workdir_tensorboard if logdir == workdir else _TensorBoard(logdir)
    try:
      tb.wait_for(lambda: _hparams_table(tb)[1])  # pylint: disable=cell-var-from-loop
      experiment, groups = _hparams_table(tb)
      names = [h["name"] for h in experiment["hparamInfos"]]
      # The key fields first (marked "differs"; the table shows the first five by default).
      assert names[:6] == ["batch_size", "hypernet.chunk_size", "hypernet.kind", "num_steps",
                           "optim.lr", "seed"]
      assert [h["differs"] for h in experiment["hparamInfos"][:7]] == [True] * 6 + [False]
      assert "params.trainable" in names and not [n for n in names if n.startswith("meta.")]
      columns = {(m["name"]["tag"], m["name"].get("group", "")) for m in
                 experiment["metricInfos"]}
      assert columns == {("loss", ""), ("accuracy", "")}
      assert len(groups) == 1 and groups[0]["sessions"][0]["name"] == session
      hparams = groups[0]["hparams"]
      assert hparams["hypernet.kind"] == "chunked"
      assert hparams["optim.lr"] == pytest.approx(_config().optim.lr)
      # Integers as text, so that the table shows "16974" and "64", not "16974." / "64.000".
      assert hparams["params.trainable"] == str(result["params/trainable"])
      assert hparams["batch_size"] == "64" and hparams["hypernet.chunk_size"] == "1024"
      values = {m["name"]["tag"]: m["value"] for m in groups[0]["metricValues"]}
      assert set(values) == {"loss", "accuracy"}, (logdir, values)
      assert values["accuracy"] == pytest.approx(result["accuracy"], abs=1e-6)
      assert values["loss"] == pytest.approx(result["loss"], rel=1e-6)
    finally:
      if tb is not workdir_tensorboard:
        tb.close()


def test_model_summaries_and_nan_diagnosis_run_under_mirrored_strategy(run, tmp_path):
  """Gradients of distributed variables are taken in replica context: on two replicas
  the step-0 summaries equal the single-device ones (same init, same batch: batch s
  depends only on the seed and s). The single-device ones: the shared run's."""
  if len(tf.config.list_logical_devices("CPU")) < 2:
    pytest.skip("needs the two logical CPUs set up by conftest.py")
  runs = {"auto": _events(run[0] / "train")}
  c = _config()
  c.distribution = "mirrored"
  c.num_steps = c.summaries.every = c.log_every = c.eval_every = c.checkpoint_every = 10
  c.summaries.profile_steps = 0
  loop.train_and_evaluate(c, str(tmp_path / "mirrored"))
  runs["mirrored"] = _events(tmp_path / "mirrored" / "train")
  grad_tags = [t for t in runs["auto"] if t.startswith(("weights/grad_norm/", "weights/norm/generated/"))]
  assert len(grad_tags) == 5 + 8  # 5 hypernetwork variables, 8 generated tensors
  for tag in grad_tags:
    np.testing.assert_allclose(runs["mirrored"][tag][0], runs["auto"][tag][0], rtol=1e-5,
                               err_msg=tag)
  c = _config()
  c.distribution = "mirrored"
  trainer = loop.Trainer(c, str(tmp_path / "mirrored"))
  trainer.restore()
  assert loop.first_nonfinite_tensor(trainer, 11).startswith(
      "none: the step was finite when replayed")


def test_smoothed_is_tensorboards_default_smoothing():
  """TensorBoard's charts: a debiased exponential moving average over the points (weight
  0.6), here against its closed form; the main job's eval accuracy with 4 evaluations
  from chance reads 89.57% for 98.61% (what a newcomer saw)."""
  values = [0.10306, 0.96936, 0.98607, 0.98607]
  w = 0.6
  closed = [sum((1 - w) * w ** (n - i) * values[i] for i in range(n + 1)) / (1 - w ** (n + 1))
            for n in range(len(values))]
  np.testing.assert_allclose(summaries.smoothed(values), closed, rtol=1e-12)
  assert summaries.smoothed(values)[-1] == pytest.approx(0.8957, abs=5e-5)
  assert summaries.smoothed([0.5, 0.5, 0.5]) == [0.5, 0.5, 0.5]  # Constant: as is.
  assert summaries.smoothed([1.0, float("nan"), 3.0])[1] != summaries.smoothed([1.0])[0]


def test_a_misleading_smoothed_eval_curve_is_pointed_out(tmp_path):
  writer = summaries.Writer(str(tmp_path))
  for step, accuracy, loss in ((0, 0.10306, 2.3), (1000, 0.96936, 0.104), (2000, 0.98607, 0.06),
                               (3000, 0.98607, 0.081)):
    writer.scalars(step, {"accuracy": accuracy, "loss": loss}, "eval")
  writer.flush()
  note = summaries.smoothing_note(str(tmp_path / "eval"), ["accuracy"])
  assert note == ("TensorBoard's default smoothing (0.6) draws the last eval accuracy as "
                  "89.57% (the value is 98.61%, 4 points): set its Smoothing slider to 0 or "
                  "evaluate more often (config.eval_every).")
  many = summaries.Writer(str(tmp_path / "many"))
  for i in range(31):  # Every 100 steps: the smoothing has caught up by the end.
    many.scalars(100 * i, {"accuracy": 0.10306 if i == 0 else 0.98607}, "eval")
  many.flush()
  assert summaries.smoothing_note(str(tmp_path / "many" / "eval"), ["accuracy"]) is None


def _plugin_values(logdir, tag):
  for path in tf.io.gfile.glob(os.path.join(logdir, "events.out.tfevents.*")):
    for e in tf.compat.v1.train.summary_iterator(path):
      for v in e.summary.value:
        if v.tag == tag:
          return v
  raise AssertionError(f"no {tag!r} in {logdir}")


def test_hparams_integers_are_text_and_the_text_config_lists_the_used_fields(tmp_path):
  """TensorBoard's HParams table prints numbers with 5 significant digits (64 as
  "64.000"): integers go in as text. The Text tab's config: the fields the run uses,
  one per row, values as written on the command line (no YAML tags)."""
  from tensorboard.plugins.hparams import plugin_data_pb2  # pylint: disable=g-import-not-at-top
  config = digits_hyper.get_config()
  writer = summaries.Writer(str(tmp_path))
  writer.hparams(config, ["loss", "accuracy"], {"params.trainable": 16974})
  writer.config(config)
  writer.flush()
  value = _plugin_values(str(tmp_path / "eval"), "_hparams_/session_start_info")
  hparams = plugin_data_pb2.HParamsPluginData.FromString(
      value.metadata.plugin_data.content).session_start_info.hparams
  assert hparams["batch_size"].string_value == "64"
  assert hparams["hypernet.chunk_size"].string_value == "1024"
  assert hparams["params.trainable"].string_value == "16974"
  assert hparams["optim.lr"].number_value == pytest.approx(5e-3)  # Floats stay numbers.
  assert hparams["hypernet.kind"].string_value == "chunked"
  text = tf.make_ndarray(_plugin_values(str(tmp_path / "train"), "config").tensor).item()
  rows = text.decode().splitlines()
  assert rows[:2] == ["| field | value |", "|---|---|"]
  assert "| `model.conv_widths` | `(32, 64)` |" in rows
  assert "| `hypernet.kind` | `'chunked'` |" in rows and "| `eval_every` | `200` |" in rows
  assert not [r for r in rows if "continual." in r or "meta." in r or "data.data_dir" in r]
  assert "!!python" not in text.decode()


def _few_shot_digits_config():
  """5-way 1-shot MAML on digits (episodes, meta-batches, fixed evaluation tasks)."""
  c = config_lib.base_config()
  c.task, c.data.name = "few_shot", "digits"
  c.model.name, c.model.conv_widths = "conv4", (8, 8)
  c.optim.name, c.optim.schedule = "sgd", "constant"
  c.batch_size, c.eval_batch_size = 4, 6
  c.meta.num_queries, c.meta.eval_queries, c.meta.eval_episodes = 2, 2, 10
  return c


def _continual_digits_config():
  """Split digits, two tasks (the continual pipeline: per-task datasets concatenated)."""
  c = split_fmnist_hnet.get_config()
  c.data.name = "digits"
  c.continual.num_tasks, c.continual.steps_per_task = 2, 1
  c.num_steps = 2
  c.model.dense_widths, c.hypernet.hidden = (16,), (8,)
  return c


@pytest.mark.parametrize("make_config", [_config, _few_shot_digits_config,
                                         _continual_digits_config])
def test_nothing_a_run_traces_is_converted_by_autograph(make_config, tmp_path, monkeypatch):
  """The Task contract (hypernet.tasks.Task): everything a run traces is traced as
  written, never converted by AutoGraph: the train loop (a ``tf.while_loop``), the
  replica step (the task's loss, the optimiser's update, the state), the evaluation,
  the model summaries and the input pipelines' ``Dataset.map`` functions (the pixel
  pipeline, the episodes and meta-batches, the continual tasks' datasets). Converting
  them was most of a short run's start: on a digits run, 3.9 s of summaries and 2.2 s of
  train step against 1.0 and 0.9 s; the pipelines' and the loop's conversions ~0.5 s of
  a 2.4 s 10-step run. Counted at AutoGraph's converter (a private hook, tests only)."""
  from tensorflow.python.autograph.impl import api  # pylint: disable=g-import-not-at-top
  converted = []
  real = api._convert_actual  # pylint: disable=protected-access

  def counting(entity, program_ctx):
    if getattr(entity, "__module__", "").startswith(("hypernet", "keras")):
      converted.append(f"{entity.__module__}.{getattr(entity, '__qualname__', entity)}")
    return real(entity, program_ctx)

  monkeypatch.setattr(api, "_convert_actual", counting)
  c = make_config()
  c.summaries.profile_steps = 0
  trainer = loop.Trainer(c, str(tmp_path))
  if c.task == "classification":
    model_summaries = summaries.ModelSummaries(trainer.task, trainer.variables, c,
                                               trainer.strategy)
    values = model_summaries.compute(0)
    assert values["scalars"] and values["histograms"]
  sums, first_bad = trainer.train_chunk(trainer.train_iterator(0), 2)
  assert first_bad == -1 and np.isfinite(sums["loss"]), sums
  assert trainer.evaluate()["accuracy"] > 0.0
  assert not converted, converted
