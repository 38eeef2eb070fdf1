"""Never lose a run: signals, kill -9, the workdir lock, NaN/inf steps, reproducibility.

The subprocess tests run the real command line (``python -m hypernet.train``) and signal
it; parameters are compared bitwise (``config.deterministic=True`` on CPU).
"""
import dataclasses
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import tensorflow as tf

from hypernet.training import checkpoints, cli, distribute, loop
from hypernet.config_lib import ConfigError
from hypernet import data as data_lib
from hypernet.data import pipeline

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "configs"))
import cluster  # noqa: E402  pylint: disable=g-import-not-at-top
import digits_hyper  # noqa: E402  pylint: disable=g-import-not-at-top

TIMEOUT = 240  # seconds; every wait below is bounded so nothing can hang.


def _config(**overrides):
  c = digits_hyper.get_config()
  c.num_steps = 60
  c.log_every = 10
  c.eval_every = 0
  c.checkpoint_every = 20
  c.summaries.every = 0
  c.optim.schedule = "constant"
  c.update_from_flattened_dict(overrides)
  return c


def _checkpoint_values(path):
  """Every saved tensor but the save counter; ``path`` a workdir or checkpoint prefix."""
  if os.path.isdir(path):
    path = tf.train.latest_checkpoint(checkpoints.checkpoint_dir(path))
  reader = tf.train.load_checkpoint(path)
  return {n: reader.get_tensor(n) for n, _ in tf.train.list_variables(path)
          if not n.startswith(("save_counter", "_CHECKPOINTABLE"))}


def _parameters(values):
  return {k: v for k, v in values.items() if not k.startswith("step/")}


class _Job(cluster.Job):
  """A ``python -m hypernet.train`` subprocess whose stderr is collected by a thread
  (``tests/cluster.py``), waited for with this file's timeouts."""

  def __init__(self, workdir, *flags):
    self.cmd = [sys.executable, "-m", "hypernet.train", "--config=configs/digits_hyper.py",
                f"--workdir={workdir}", "--config.eval_every=0", "--config.summaries.every=0",
                "--config.deterministic=True", *flags]
    super().__init__(self.cmd, dict(os.environ))

  def wait_for(self, pattern, timeout=TIMEOUT):
    """Blocks until a stderr line matches ``pattern``; returns the match (killed on
    timing out)."""
    try:
      return super().wait_for(pattern, time.time() + timeout)
    except AssertionError:
      self.kill()
      raise

  def wait(self, timeout=TIMEOUT):
    return super().wait(time.time() + timeout)


@pytest.mark.slow
def test_sigterm_saves_resume_is_bitwise_and_lock_refuses_second_job(tmp_path):
  """SIGTERM, rerun == one uninterrupted run, bitwise (op determinism on); meanwhile a
  second job on the busy workdir is refused. (SIGINT: the in-process test below.)"""
  # 300 steps: the job is signalled at step 60 plus the ~1 s that the refusal below takes
  # (it had reached step ~130 when measured on 2 busy cores), so a stop mid-run is left
  # ~170 steps of margin; the resumed run still trains more steps than were interrupted.
  flags = ["--config.num_steps=300", "--config.log_every=10", "--config.checkpoint_every=1000"]
  reference = _Job(tmp_path / "ref", *flags)  # Runs alongside the interrupted job.
  job = _Job(tmp_path / "run", *flags)
  job.wait_for(r"step 60/300")  # The console shows every 30th step (ten lines).
  with pytest.raises(checkpoints.WorkdirInUseError, match=rf"in use .*pid {job.proc.pid}\b"):
    loop.train_and_evaluate(_config(num_steps=600), str(tmp_path / "run"))
  job.proc.send_signal(signal.SIGTERM)
  assert job.wait() == checkpoints.EXIT_RESTART, job.log[-3000:]
  stopped = int(job.wait_for(r"Stopped by SIGTERM at step (\d+)").group(1))
  assert 60 <= stopped < 300 and stopped % 10 == 0
  assert tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints")).endswith(
      f"ckpt-{stopped}")

  job = _Job(tmp_path / "run", *flags)
  assert job.wait() == 0, job.log[-3000:]
  assert re.search(rf"Resumed from .*ckpt-{stopped} at step {stopped}\b", job.log)
  assert reference.wait() == 0, reference.log[-3000:]
  ref, run = _checkpoint_values(tmp_path / "ref"), _checkpoint_values(tmp_path / "run")
  assert ref.keys() == run.keys() and len(ref) >= 20
  assert ref["step/.ATTRIBUTES/VARIABLE_VALUE"] == 300
  for k in ref:
    np.testing.assert_array_equal(ref[k], run[k], err_msg=k)


@pytest.mark.slow
def test_kill_9_at_any_moment_leaves_a_restorable_checkpoint(tmp_path):
  """A job that checkpoints every step is killed -9 at random moments, mostly mid-save."""
  flags = ["--config.num_steps=100000", "--config.checkpoint_every=1", "--config.log_every=1",
           "--config.checkpoint_keep=2"]
  config = _config(num_steps=100000, **{"optim.schedule": "cosine"})
  trainer = loop.Trainer(config, str(tmp_path / "probe"))
  rng = random.Random(0)
  saved = []
  for _ in range(2):
    job = _Job(tmp_path, *flags)
    job.wait_for(r"Compiled in")  # Training (the console shows every 10,000th step).
    deadline = time.time() + 120  # Until this job has saved a step of its own.
    while time.time() < deadline and int((tf.train.latest_checkpoint(
        str(tmp_path / "checkpoints")) or "-0").rsplit("-", 1)[1]) <= (saved[-1] if saved else 0):
      time.sleep(0.1)
    time.sleep(rng.uniform(0.2, 1.5))
    job.proc.send_signal(signal.SIGKILL)
    assert job.wait() == -signal.SIGKILL
    latest = tf.train.latest_checkpoint(str(tmp_path / "checkpoints"))
    assert latest is not None
    status = trainer.checkpoint.restore(latest)
    status.assert_existing_objects_matched()  # Every variable restored from a whole file.
    assert int(trainer.step.read_value()) == int(latest.rsplit("-", 1)[1])
    values = _checkpoint_values(latest)
    assert all(np.all(np.isfinite(v)) for v in values.values() if v.dtype.kind == "f")
    saved.append(int(trainer.step.read_value()))
  assert saved[1] > saved[0] > 0
  # The lock died with the process: the next job is not refused, and continues.
  config.num_steps = saved[1] + 5
  assert loop.train_and_evaluate(config, str(tmp_path))["step"] == saved[1] + 5


def _poisoned_digits(monkeypatch, image=0):
  """Digits whose training image ``image`` holds one NaN pixel (float32 images)."""
  real = data_lib.load_classification

  def load(config):
    d = real(config)
    x = d.x_train.astype(np.float32)
    x[image, 3, 3, 0] = np.nan
    return dataclasses.replace(d, x_train=x, x_test=d.x_test.astype(np.float32))

  monkeypatch.setattr(data_lib, "load_classification", load)
  return load


def _bad_steps(data, config, num_steps):
  """1-based steps whose training batch holds a NaN, read from the real pipeline."""
  ds = pipeline.train_dataset(data, config.batch_size, config.seed, num_steps=num_steps,
                              augment_shift=config.data.augment_shift)
  return [s + 1 for s, b in enumerate(ds) if not np.all(np.isfinite(b["image"].numpy()))]


def test_nan_input_stops_naming_step_and_tensor_keeping_last_good_checkpoint(tmp_path, monkeypatch,
                                                                            caplog):
  caplog.set_level("INFO")
  load = _poisoned_digits(monkeypatch)
  config = _config(num_steps=60, checkpoint_every=5)
  bad = _bad_steps(load(config.data), config, 60)
  assert bad, "image 0 must be drawn within 60 steps"
  with pytest.raises(loop.NonFiniteLossError) as info:
    loop.train_and_evaluate(config, str(tmp_path))
  message = str(info.value)
  assert f"at step {bad[0]};" in message
  assert "first non-finite tensor is input batch['image'] (1 of 4096 values non-finite: " \
         "1 NaN, 0 inf)" in message
  last_good = (bad[0] - 1) // 5 * 5
  assert message.count(f"ckpt-{last_good})") == 1
  assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith(f"ckpt-{last_good}")
  values = _checkpoint_values(tmp_path)
  assert all(np.all(np.isfinite(v)) for v in values.values() if v.dtype.kind == "f")
  # The search for the bad step rewinds; a fresh run is not reported as resumed.
  assert "Rewound to" in caplog.text and "Resumed from" not in caplog.text


def test_huge_learning_rate_names_the_first_overflowing_tensor(tmp_path):
  loop.train_and_evaluate(_config(num_steps=20), str(tmp_path))
  with pytest.raises(loop.NonFiniteLossError,
                     match=r"at step \d+; the first non-finite tensor is (generated weight "
                           r"\w+/\w+|parameter \S+|loss|gradient of \S+) \(\d+ of \d+ values"):
    loop.train_and_evaluate(_config(num_steps=60, **{"optim.lr": 1e30}), str(tmp_path))


_MIRRORED_OK = hasattr(loop.Trainer, "current_step")  # Mirrored restore (distribute).


@pytest.mark.parametrize("distribution", [
    "auto", pytest.param("mirrored", marks=[pytest.mark.slow, pytest.mark.skipif(
        not _MIRRORED_OK, reason="Trainer.restore on MirroredStrategy comes with the "
        "'distribute' branch")])])
def test_skip_mode_skips_exactly_the_bad_steps(tmp_path, monkeypatch, distribution):
  """Skipping step s leaves the parameters of step s - 1: equal to a run that stops there."""
  load = _poisoned_digits(monkeypatch)
  base = _config(distribution=distribution)
  bad = _bad_steps(load(base.data), base, 80)[:2]
  assert len(bad) == 2, bad
  total = bad[1] + 3
  config = _config(num_steps=total, distribution=distribution, checkpoint_keep=10,
                   **{"fault.nonfinite": "skip", "fault.max_skips": 2})
  result = loop.train_and_evaluate(config, str(tmp_path / "skip"))
  assert result["skipped_steps"] == bad and result["step"] == total
  assert np.isfinite(result["loss"]) and result["accuracy"] > 0.1
  # ckpt-<s> is saved right after skipping s: the parameters of a clean run of s - 1 steps.
  loop.train_and_evaluate(_config(num_steps=bad[0] - 1, distribution=distribution),
                               str(tmp_path / "clean"))
  skipped = _parameters(_checkpoint_values(str(tmp_path / "skip" / "checkpoints" /
                                               f"ckpt-{bad[0]}")))
  clean = _parameters(_checkpoint_values(tmp_path / "clean"))
  assert skipped.keys() == clean.keys()
  for k in clean:
    np.testing.assert_array_equal(skipped[k], clean[k], err_msg=k)
  # One skip allowed: the second bad step stops the run and says so.
  config.fault.max_skips = 1
  with pytest.raises(loop.NonFiniteLossError,
                     match=rf"at step {bad[1]} after skipping 1 steps \[{bad[0]}\]"):
    loop.train_and_evaluate(config, str(tmp_path / "one_skip"))


def test_same_seed_same_run_and_summaries_do_not_change_training(tmp_path):
  a = loop.train_and_evaluate(_config(num_steps=40, **{"summaries.every": 10}),
                                   str(tmp_path / "a"))
  b = loop.train_and_evaluate(_config(num_steps=40), str(tmp_path / "b"))
  c = loop.train_and_evaluate(_config(num_steps=40, seed=1), str(tmp_path / "c"))
  assert (a["loss"], a["accuracy"]) == (b["loss"], b["accuracy"])
  va, vb, vc = (_checkpoint_values(tmp_path / n) for n in "abc")
  for k in va:
    np.testing.assert_array_equal(va[k], vb[k], err_msg=k)
  assert a["loss"] != c["loss"]
  assert any(not np.array_equal(va[k], vc[k]) for k in va if k.startswith("hypernetwork"))


def test_sigint_in_process_saves_then_raises_keyboard_interrupt(tmp_path):
  """The catcher turns SIGINT into checkpoint-then-KeyboardInterrupt, here without a
  subprocess: the signal is sent by the first summary of the run itself."""
  from hypernet.training import summaries  # pylint: disable=g-import-not-at-top
  original = summaries.ModelSummaries.write

  def write_and_interrupt(self, writer, step):
    original(self, writer, step)
    if step == 10:
      os.kill(os.getpid(), signal.SIGINT)

  config = _config(num_steps=60, **{"summaries.every": 10})
  # Python's default SIGINT handler (a shell's background job starts with SIGINT ignored,
  # and the catcher then leaves it ignored: next test).
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    with pytest.MonkeyPatch.context() as mp:
      mp.setattr(summaries.ModelSummaries, "write", write_and_interrupt)
      with pytest.raises(KeyboardInterrupt):
        loop.train_and_evaluate(config, str(tmp_path))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
  finally:
    signal.signal(signal.SIGINT, previous)
  # Stopped right after step 10 (not a checkpoint step) and saved it.
  assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-10")
  result = loop.train_and_evaluate(config, str(tmp_path))  # The lock was released.
  assert result["step"] == 60


def test_ignored_signal_stays_ignored_and_a_returning_handler_still_stops():
  """A process started with SIGINT ignored (a script's ``cmd &``) keeps ignoring it: the
  catcher does not take it over, so it cannot stop the run and then report success. And
  when the previous handler returns, exit_by_signal exits with 128 + signum."""
  previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    with checkpoints.SignalCatcher() as catcher:
      assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
      assert signal.getsignal(signal.SIGTERM) == catcher._handler  # pylint: disable=protected-access
      os.kill(os.getpid(), signal.SIGINT)
      assert catcher.received is None
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    seen = []
    signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    with checkpoints.SignalCatcher() as catcher:
      os.kill(os.getpid(), signal.SIGINT)
      assert catcher.received == signal.SIGINT
    with pytest.raises(SystemExit) as exit_info:
      catcher.exit_by_signal()
    assert seen == [signal.SIGINT] and exit_info.value.code == 128 + signal.SIGINT
  finally:
    signal.signal(signal.SIGINT, previous)


# -- checkpoints that heal, log points after a resume, full disks, stale worker folders --
def _small(**overrides):
  return _config(**{"model.conv_widths": (8,), "model.dense_widths": (16,),
                    "hypernet.chunk_size": 256, "hypernet.hidden": (16,), **overrides})


def test_unreadable_or_missing_latest_checkpoint_falls_back_and_is_kept_aside(tmp_path, caplog):
  """A truncated, a bit-flipped and a deleted latest checkpoint: each rerun resumes from
  the newest readable one with a warning naming the bad one (moved to
  checkpoints/unreadable/, not deleted) and ends equal to the uninterrupted run. A
  changed config is still told apart: it is not corruption, nothing is moved."""
  caplog.set_level("INFO")
  config = _small(num_steps=30, checkpoint_every=10, checkpoint_keep=10)
  loop.train_and_evaluate(config, str(tmp_path))
  folder = tmp_path / "checkpoints"
  reference = _checkpoint_values(str(folder / "ckpt-30"))
  data = lambda: next(folder.glob("ckpt-30.data-*"))

  def rerun(expected):
    caplog.clear()
    (tmp_path / "final_metrics.json").unlink()  # (Else the finished run is just reported.)
    assert loop.train_and_evaluate(config, str(tmp_path))["step"] == 30
    assert re.search(rf"Checkpoint \S*ckpt-30 is {expected}", caplog.text), caplog.text
    assert re.search(r"Resumed from \S*ckpt-20 at step 20\b", caplog.text), caplog.text
    values = _checkpoint_values(str(folder / "ckpt-30"))
    for k in reference:
      np.testing.assert_array_equal(values[k], reference[k], err_msg=k)

  with open(data(), "r+b") as f:  # Truncated to half.
    f.truncate(os.path.getsize(data()) // 2)
  rerun(r"unreadable \(IndexError: Read less bytes than requested\); moved to "
        r"\S*unreadable/ckpt-30; trying the one before it")
  assert sorted(p.name for p in (folder / "unreadable").iterdir()) == [
      "ckpt-30.data-00000-of-00001", "ckpt-30.index"]
  with open(data(), "r+b") as f:  # 16 bytes inverted in the middle.
    f.seek(os.path.getsize(data()) // 2)
    chunk = f.read(16)
    f.seek(-16, 1)
    f.write(bytes(255 - b for b in chunk))
  rerun(r"unreadable \(\w*Error: .*Checksum does not match.*\); moved to "
        r"\S*unreadable/ckpt-30\.2;")
  assert "does not fit this config" not in caplog.text
  for p in folder.glob("ckpt-30.*"):  # Deleted.
    p.unlink()
  rerun(r"missing; trying the one before it")
  # The state file lists only what can be resumed: the rotation keeps the good ones.
  state = tf.train.get_checkpoint_state(str(folder))
  assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
      f"ckpt-{s}" for s in (0, 10, 20, 30)]
  # Another model: a config mismatch, reported as such; nothing is moved.
  with pytest.raises(ConfigError, match=r"ckpt-30 does not fit this config"):
    loop.train_and_evaluate(_small(num_steps=40, checkpoint_every=10, checkpoint_keep=10,
                                   **{"model.dense_widths": (12,)}), str(tmp_path))
  assert (folder / "ckpt-30.index").exists()


def test_first_log_point_after_a_resume_averages_every_step_since_the_last(tmp_path,
                                                                         monkeypatch):
  from hypernet.training import summaries  # pylint: disable=g-import-not-at-top
  points = {}
  original = summaries.Writer.scalars

  def record(self, step, values, split="train"):
    if split == "train":
      points[step] = dict(values)
    return original(self, step, values, split)

  monkeypatch.setattr(summaries.Writer, "scalars", record)
  loop.train_and_evaluate(_small(num_steps=20, checkpoint_every=10), str(tmp_path / "a"))
  a = points.pop(20)
  loop.train_and_evaluate(_small(num_steps=10, checkpoint_every=10), str(tmp_path / "b"))
  loop.train_and_evaluate(_small(num_steps=20, checkpoint_every=10), str(tmp_path / "b"))
  b = points.pop(20)
  # Identical parameters; the point at step 20 averages steps 11-20 in both runs.
  assert b["loss"] == pytest.approx(a["loss"], rel=1e-6)
  assert b["accuracy"] == pytest.approx(a["accuracy"], abs=1e-9)


def test_full_disk_while_saving_is_one_line_naming_the_folder(tmp_path, monkeypatch):
  original = tf.train.CheckpointManager.save

  def save(self, checkpoint_number=None, **kw):
    if checkpoint_number == 20:  # What TensorFlow raises, after writing part of the files.
      partial = os.path.join(self.directory, "ckpt-20_temp")
      os.makedirs(partial)
      raise tf.errors.ResourceExhaustedError(
          None, None, f"{partial}/part-00000-of-00001.data-00000-of-00001.tempstate1; No "
          "space left on device [Op:SaveV2]")
    return original(self, checkpoint_number=checkpoint_number, **kw)

  monkeypatch.setattr(tf.train.CheckpointManager, "save", save)
  folder = tmp_path / "checkpoints"
  with pytest.raises(loop.WorkdirWriteError) as info:
    loop.train_and_evaluate(_small(num_steps=30, checkpoint_every=10), str(tmp_path))
  assert str(info.value) == (
      f"Cannot write checkpoint ckpt-20 to {folder}: No space left on device. The previous "
      f"checkpoint ({folder}/ckpt-10) is kept; free space or fix that folder's permissions, "
      "then rerun the same command to resume.")
  assert not (folder / "ckpt-20_temp").exists()
  assert loop.WorkdirWriteError in cli.user_errors()  # One line, exit status 1.


def test_a_killed_workers_checkpoint_folder_is_removed_when_it_starts_again(tmp_path,
                                                                            monkeypatch):
  import fcntl  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  monkeypatch.setenv("TF_CONFIG", json.dumps(
      {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
       "task": {"type": "worker", "index": 1}}))
  strategy = tf.distribute.get_strategy()
  first = distribute.write_dir(str(tmp_path / "wd"), strategy)
  live = distribute.write_dir(str(tmp_path / "wd"), strategy)  # Another live process's.
  assert os.path.basename(first).startswith("hypernet-worker1-") and first != live
  # The first process dies by kill -9: its lock goes, its folder stays.
  os.close(distribute._WRITE_DIR_LOCKS.pop(first))  # pylint: disable=protected-access
  (pathlib.Path(first) / "checkpoints").mkdir()
  third = distribute.write_dir(str(tmp_path / "wd"), strategy)
  assert not os.path.exists(first) and os.path.isdir(live) and os.path.isdir(third)
  # A folder whose lock is held elsewhere (another open file) is never removed.
  fd = os.open(os.path.join(live, "owner.lock"), os.O_RDWR)
  with pytest.raises(OSError):
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  os.close(fd)
  for path in (live, third):
    distribute.remove_write_dir(path, str(tmp_path / "wd"))
  assert not list(tmp_path.glob("hypernet-*"))
