"""The one train loop end to end: accuracy on real data, resume, NaN guard, summaries."""
import json
import re
import os
import shutil
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from hypernet.training import actions, loop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "configs"))
import digits_hyper  # noqa: E402  pylint: disable=g-import-not-at-top


def _small_config(**overrides):
  c = digits_hyper.get_config()
  c.num_steps = 60
  c.log_every = 20
  c.eval_every = 60
  c.checkpoint_every = 20
  c.optim.schedule = "constant"
  c.update_from_flattened_dict(overrides)
  return c


@pytest.fixture(scope="module")
def trained_20(tmp_path_factory):
  """A finished 20-step run of _small_config (ckpt-20): the run the resume tests start
  from. Never written to: each test resumes a copy of it (_copy_of)."""
  path = tmp_path_factory.mktemp("trained_20")
  loop.train_and_evaluate(_small_config(num_steps=20), str(path))
  return path


def _copy_of(workdir, tmp_path):
  shutil.copytree(workdir, tmp_path, dirs_exist_ok=True)
  return tmp_path


def _checkpoint_values(workdir):
  reader = tf.train.load_checkpoint(os.path.join(workdir, "checkpoints"))
  # Everything but the save counter: weights, optimiser slots and step.
  names = [n for n, _ in tf.train.list_variables(os.path.join(workdir, "checkpoints"))
           if not n.startswith(("save_counter", "_CHECKPOINTABLE"))]
  return {n: reader.get_tensor(n) for n in names}


def _scalar_tags(logdir):
  tags = {}
  for f in tf.io.gfile.glob(os.path.join(logdir, "events.out.tfevents.*")):
    for e in tf.compat.v1.train.summary_iterator(f):
      for v in e.summary.value:
        tags.setdefault(v.tag, []).append(e.step)
  return tags


@pytest.mark.slow
def test_main_job_reaches_97_percent_on_digits(tmp_path):
  """The README's main job, as configured: every conv and dense weight is generated."""
  config = digits_hyper.get_config()
  result = loop.train_and_evaluate(config, str(tmp_path))
  assert result["accuracy"] >= 0.97, result
  assert result["params/generated"] == result["params/target"] > 0
  assert result["params/trainable"] == result["params/source"]  # nothing trained directly
  with open(tmp_path / "final_metrics.json") as f:
    saved = json.load(f)
  assert saved["accuracy"] == pytest.approx(result["accuracy"])
  # Every weight generated from fewer than half as many parameters (2.12x).
  assert saved["params/source"] == 16974 and saved["params/generated"] == 35914
  assert saved["params/compression_ratio"] == pytest.approx(35914 / 16974)
  train_tags = _scalar_tags(tmp_path / "train")
  for tag in ("loss", "accuracy", "optimizer/learning_rate", "speed/steps_per_sec",
              "optimizer/grad_norm"):
    assert tag in train_tags, train_tags.keys()
  assert max(train_tags["loss"]) == config.num_steps == 10000
  eval_tags = _scalar_tags(tmp_path / "eval")
  assert "accuracy" in eval_tags and "config" in train_tags
  assert_tensorboard_opens_on_the_truth(tmp_path, result)


def assert_tensorboard_opens_on_the_truth(workdir, result):
  """What TensorBoard shows first tells the truth about the run.

  * With its default smoothing (0.6: a debiased moving average over the points,
    summaries.smoothed) the eval curves end within 0.5 percentage points (accuracy) / 10%
    (loss) of the final values;
  * Time Series groups every tag (scalars, histograms, images of both runs) by its first
    path component, sorts the groups by name and expands the first two: they are the
    accuracy and loss cards;
  * the Text tab's config lists the fields this run uses, as written on the command line.
  """
  from hypernet.training import summaries  # pylint: disable=g-import-not-at-top
  evals = summaries.read_scalars(str(workdir / "eval"))
  for tag, tolerance in (("accuracy", 0.005), ("loss", 0.1 * result["loss"])):
    values = [v for _, v in evals[tag]]
    assert values[-1] == pytest.approx(result[tag], rel=1e-6)
    assert abs(summaries.smoothed(values)[-1] - values[-1]) <= tolerance, (tag, values)
  tags = _time_series_tags(workdir / "train") | _time_series_tags(workdir / "eval")
  groups = sorted({t.split("/", 1)[0] for t in tags})  # (no digits: plain order is natural)
  assert groups[:2] == ["accuracy", "loss"], groups
  config_text = _text(workdir / "train", "config")
  assert "!!python" not in config_text and "| `hypernet.chunk_size` | `1024` |" in config_text
  assert "`model.conv_widths` | `(32, 64)`" in config_text
  assert "continual." not in config_text and "meta.inner_lr" not in config_text


def _time_series_tags(logdir):
  """The tags TensorBoard's Time Series tab shows: scalars, histograms and images."""
  tags = set()
  for f in tf.io.gfile.glob(os.path.join(logdir, "events.out.tfevents.*")):
    for e in tf.compat.v1.train.summary_iterator(f):
      for v in e.summary.value:
        if v.metadata.plugin_data.plugin_name in ("scalars", "histograms", "images"):
          tags.add(v.tag)
  return tags


def _text(logdir, tag):
  for f in tf.io.gfile.glob(os.path.join(logdir, "events.out.tfevents.*")):
    for e in tf.compat.v1.train.summary_iterator(f):
      for v in e.summary.value:
        if v.tag == tag:
          return tf.make_ndarray(v.tensor).item().decode()
  raise AssertionError(f"no text {tag!r} in {logdir}")


def test_resume_matches_uninterrupted_run(tmp_path):
  straight = loop.train_and_evaluate(_small_config(), str(tmp_path / "a"))
  first = loop.train_and_evaluate(_small_config(num_steps=40), str(tmp_path / "b"))
  assert first["step"] == 40
  resumed = loop.train_and_evaluate(_small_config(), str(tmp_path / "b"))
  assert resumed["step"] == 60
  a, b = _checkpoint_values(tmp_path / "a"), _checkpoint_values(tmp_path / "b")
  assert a.keys() == b.keys() and len(a) >= 20
  for k in a:
    np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)
  assert resumed["accuracy"] == pytest.approx(straight["accuracy"], abs=1e-6)


def test_nan_loss_stops_naming_the_step_and_keeps_last_good_checkpoint(tmp_path,
                                                                        trained_20):
  _copy_of(trained_20, tmp_path)
  good = _checkpoint_values(tmp_path)
  bad = _small_config(num_steps=60, **{"optim.lr": 1e30})
  with pytest.raises(loop.NonFiniteLossError, match=r"at step (2[1-9]|3\d|40)\b"):
    loop.train_and_evaluate(bad, str(tmp_path))
  manager_state = tf.train.get_checkpoint_state(str(tmp_path / "checkpoints"))
  assert manager_state.model_checkpoint_path.endswith("ckpt-20")
  after = _checkpoint_values(tmp_path)
  for k in good:
    np.testing.assert_array_equal(good[k], after[k])


def test_resume_with_an_incompatible_config_names_the_changed_fields(tmp_path, trained_20):
  from hypernet import config_lib
  _copy_of(trained_20, tmp_path)
  plain = _small_config(num_steps=40, **{"hypernet.kind": "none"})
  with pytest.raises(config_lib.ConfigError,
                     match=r"does not fit this config.*hypernet\.kind: 'chunked' -> 'none'"):
    loop.train_and_evaluate(plain, str(tmp_path))


def test_resume_of_another_versions_checkpoint_says_so(tmp_path, monkeypatch, trained_20):
  """A checkpoint that does not fit though the config is the same (a hypernet version
  with another checkpoint layout wrote it) is refused as such, not as an 'unknown'
  config change with the advice to rerun with the same config."""
  from hypernet import config_lib
  from hypernet.tasks import classification
  _copy_of(trained_20, tmp_path)
  trackables = classification.ClassificationTask.trackables
  monkeypatch.setattr(classification.ClassificationTask, "trackables",
                      lambda self: dict(trackables(self), added=tf.Variable(0.0)))
  with pytest.raises(config_lib.ConfigError,
                     match=r"ckpt-20 does not fit this config: its config is this run's, so "
                           r"another version of hypernet wrote it") as e:
    loop.train_and_evaluate(_small_config(num_steps=20), str(tmp_path))
  assert "unknown" not in str(e.value)


def test_resume_with_a_changed_lr_keeps_the_original_config_json(tmp_path, trained_20):
  _copy_of(trained_20, tmp_path)
  original = (tmp_path / "config.json").read_text()
  result = loop.train_and_evaluate(_small_config(num_steps=40, **{"optim.lr": 3e-3}),
                                        str(tmp_path))
  assert result["step"] == 40
  assert (tmp_path / "config.json").read_text() == original
  resumed = json.loads((tmp_path / "config_resumed_at_20.json").read_text())
  assert resumed["optim"]["lr"] == 3e-3 and resumed["num_steps"] == 40


def test_each_checkpoint_is_evaluated_with_the_config_that_trained_it(tmp_path):
  """A field that keeps the parameters' shapes (the generator's activation) changed on
  resume: evaluating the latest checkpoint rebuilds the resumed run's network (equal to
  its final metrics), an earlier checkpoint the network that wrote it; resuming back to
  the original config records that too."""
  from hypernet import evaluate  # pylint: disable=g-import-not-at-top
  from hypernet.training.workdir import Workdir  # pylint: disable=g-import-not-at-top
  w = Workdir(str(tmp_path))
  first = loop.train_and_evaluate(_small_config(num_steps=20, **{
      "hypernet.activation": "elu", "checkpoint_keep": 10, "eval_every": 20}), w.path)
  second = loop.train_and_evaluate(_small_config(num_steps=40, **{
      "hypernet.activation": "tanh", "checkpoint_keep": 10, "eval_every": 20}), w.path)
  assert json.loads(open(w.config).read())["hypernet"]["activation"] == "elu"
  assert [w.config_at(s) for s in (0, 20, 21, 40, None)] == [w.config] * 2 + [
      w.resumed_config(20)] * 3
  latest = evaluate.evaluate(w.path, output="")
  assert latest["step"] == 40 and latest["accuracy"] == second["accuracy"]
  assert latest["loss"] == pytest.approx(second["loss"], rel=1e-6)
  earlier = evaluate.evaluate(w.path, 20, output="")
  assert earlier["accuracy"] == first["accuracy"]
  assert earlier["loss"] == pytest.approx(first["loss"], rel=1e-6)
  # The two networks differ on the same weights, or the test could not fail.
  assert earlier["loss"] != pytest.approx(evaluate.evaluate(w.path, 40, output="")["loss"])
  loop.train_and_evaluate(_small_config(num_steps=60, **{
      "hypernet.activation": "elu", "checkpoint_keep": 10, "eval_every": 20}), w.path)
  assert w.config_at(60) == w.resumed_config(40)
  assert json.loads(open(w.config_at(60)).read())["hypernet"]["activation"] == "elu"
  assert evaluate.evaluate(w.path, output="")["loss"] == pytest.approx(
      evaluate.evaluate(w.path, 60, output="")["loss"])


def test_console_lines_exclude_compile_time_and_are_about_ten(tmp_path, monkeypatch, caplog):
  """The tracing of the first chunk (made to take 1000 s on a fake clock) is neither in
  the first rate nor in the ETA; it is reported on its own line; 200 steps logged every
  10 give 10 console lines (every 20 steps) while TensorBoard keeps all 20 points."""
  import types  # pylint: disable=g-import-not-at-top
  from hypernet.training import summaries  # pylint: disable=g-import-not-at-top
  offset = [0.0]
  real_time = time.time
  monkeypatch.setattr(actions, "time", types.SimpleNamespace(time=lambda: real_time() + offset[0]))
  original, calls = loop.Trainer.train_chunk_sums, []

  def train_chunk_sums(self, iterator, num_steps):
    out = original(self, iterator, num_steps)
    if not calls:
      offset[0] += 1000.0
    calls.append(num_steps)
    return out

  monkeypatch.setattr(loop.Trainer, "train_chunk_sums", train_chunk_sums)
  config = _small_config(num_steps=200, log_every=10, eval_every=0, checkpoint_every=200)
  config.summaries.every = 0
  config.hypernet.kind = "none"
  assert loop.console_interval(config) == 20
  with caplog.at_level("INFO"):
    loop.train_and_evaluate(config, str(tmp_path))
  messages = [r.getMessage() for r in caplog.records]
  assert calls[0] == 1  # The first chunk is one step: the one that traces.
  compiled = [m for m in messages if m.startswith("Compiled in ")]
  assert len(compiled) == 1 and float(compiled[0].split()[2]) >= 1000.0
  progress = [m for m in messages if m.startswith("step ")]
  assert [int(m.split()[1].split("/")[0]) for m in progress] == list(range(20, 201, 20))
  rates = [float(m.split(" steps/s")[0].rsplit(" ", 1)[1]) for m in progress]
  etas = [m.rsplit("ETA ", 1)[1] for m in progress]
  # 1000 s of tracing would show (as minutes).
  assert min(rates) > 5 and all(re.fullmatch(r"\d+s", e) for e in etas), progress
  speed = dict(summaries.read_scalars(str(tmp_path / "train"))["speed/steps_per_sec"])
  assert sorted(speed) == list(range(10, 201, 10)) and speed[10] > 5


@pytest.mark.parametrize("num_steps, log_every, eval_every, expected", [
    (10000, 100, 200, 1000),   # the main job: 10 lines, each with its step's evaluation
    (3000, 100, 200, 400),     # 8 lines, each with its step's evaluation
    (3000, 100, 1000, 300),    # rarer evaluations get lines of their own
    (1000, 100, 0, 100), (7, 7, 7, 7), (100000, 10, 0, 10000), (250, 100, 100, 100),
    (6000, 100, 1000, 600), (3000, 30, 200, 600)])
def test_console_interval_is_about_ten_lines_a_multiple_of_log_every(
    num_steps, log_every, eval_every, expected):
  config = _small_config(num_steps=num_steps, log_every=log_every, eval_every=eval_every)
  every = loop.console_interval(config)
  assert every == expected and every % log_every == 0 and num_steps / every <= 10
  config.console_every = 2 * log_every  # Asked for: every line there is.
  assert loop.console_interval(config) == 2 * log_every
