"""Keras fit() of hn.keras models under tf.distribute, stopped mid-run and rerun with
keras.callbacks.BackupAndRestore, ends where the uninterrupted run ends, bit for bit.

The job (tests/keras_backup_job.py: a chunked HyperModel over a CNN with BatchNorm and
dropout, some target weights not generated; 3 epochs of 4 steps) is stopped after a
batch of epoch 1 and run again as a new model with the same backup folder. It must resume
at epoch 1 (not from scratch: a rerun that ignored the backup would also end at the
uninterrupted weights) and end with every variable of the model and of its optimiser
(hypernetwork, the target's weights that are not generated, BatchNorm statistics,
dropout seed states, Adam's moments and step count) bitwise equal to the uninterrupted
run's, which runs here on MirroredStrategy over the two logical CPUs of
tests/conftest.py.

* MirroredStrategy, in this process: a backup every 2 batches; the fit is interrupted
  (KeyboardInterrupt) after batch 2 of epoch 1, and the rerun resumes from the backup
  after batch 1 of epoch 1 and skips the two batches it holds (hypernet/keras/resume.py;
  Keras 3 alone trains them again).
* MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1 (TF_CONFIG), each with
  its own backup folder, a backup at each epoch's end; worker 1 is killed with SIGKILL
  after batch 2 of epoch 1. Worker 0
  then waits in its next collective until it fails (tens of seconds): like a cluster
  manager, the test stops it at once and reruns both workers with the same command
  (docs/keras.md, "Killed and rerun"). An uninterrupted two-worker run ends bitwise
  where the MirroredStrategy run does (a sum of two numbers does not depend on their
  order; the same per-replica batches and dropout streams), so that run is the
  reference here too.
"""
import json
import re
import signal
import sys
import time

import numpy as np
import pytest

import keras_backup_job as job
from cluster import Job, loopback_workers, worker_env
from hypernet.training import distribute

TIMEOUT_S = 600   # Per test, start-up included; the machine may be loaded.
STOP_AT = (1, 2)  # (epoch, batch), 0-based.


def _command(strategy, save_freq, backup_dir, out, stop=False):
  args = [sys.executable, "tests/keras_backup_job.py", strategy, "hyper", str(save_freq),
          str(backup_dir), str(out)]
  return args + [",".join(map(str, STOP_AT))] if stop else args


def _epochs(log):
  """The epochs a job's console (``str``) or process (``Job``) began."""
  log = log if isinstance(log, str) else log.log
  return [int(e) for e in re.findall(r"^EPOCH (\d+)$", log, re.M)]


def _assert_same(got, want):
  assert list(got) == list(want) and len(want) >= 20
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)


# Session scope: the slow test runs first (tests/conftest.py orders slow tests first), and
# a module fixture would be run again for the other test after other files' tests.
@pytest.fixture(scope="session")
def uninterrupted():
  """Every variable after the uninterrupted run (MirroredStrategy, two logical CPUs)."""
  strategy = distribute.get_strategy("mirrored")
  assert strategy.num_replicas_in_sync == 2
  return job.state(job.run(strategy, "hyper", "epoch", None))


def _assert_backup(backup_dir, epoch, batch):
  """The latest backup resumes at ``batch`` (0-based, Keras' last batch done; 0 at an
  epoch's end) of ``epoch``."""
  assert (backup_dir / "latest.weights.h5").is_file()
  assert json.loads((backup_dir / "training_metadata.json").read_text()) == {
      "epoch": epoch, "batch": batch}


def test_mirrored_fit_interrupted_mid_epoch_resumes_to_the_uninterrupted_run(
    tmp_path, uninterrupted, capsys):
  backup = tmp_path / "backup"
  strategy = distribute.get_strategy("mirrored")
  capsys.readouterr()
  with pytest.raises(KeyboardInterrupt):
    job.run(strategy, "hyper", 2, str(backup), raise_at=STOP_AT)
  first = capsys.readouterr().out
  _assert_backup(backup, 1, 1)  # Saved after batch 1 of epoch 1: a mid-epoch backup.
  model = job.run(strategy, "hyper", 2, str(backup))  # The job rerun: a new model.
  rerun = capsys.readouterr().out
  assert _epochs(first) == [0, 1] and _epochs(rerun) == [1, 2], rerun[-3000:]
  assert not backup.exists()  # Removed by Keras at the end of the finished fit().
  _assert_same(job.state(model), uninterrupted)


@pytest.mark.slow
def test_multi_worker_fit_with_a_worker_killed_resumes_to_the_uninterrupted_run(
    tmp_path, uninterrupted):
  deadline = time.time() + TIMEOUT_S
  backups = [tmp_path / f"backup{i}" for i in range(2)]
  jobs = []

  def start(stop):
    workers = loopback_workers()
    jobs.append([Job(_command("multi_worker", "epoch", backups[i], tmp_path / f"out{i}.npz",
                              stop=stop and i == 1),
                     worker_env(tmp_path / f"tmp{i}", workers, i), stream="stdout")
                 for i in range(2)])
    return jobs[-1]

  try:
    chief, other = start(stop=True)
    other.wait_for("^BLOCKED", deadline)
    for b in backups:
      _assert_backup(b, 1, 0)  # Saved at the end of epoch 0.
    other.proc.send_signal(signal.SIGKILL)
    assert other.wait(deadline) == -signal.SIGKILL
    # The chief cannot finish the epoch alone: it waits in its next collective until the
    # coordination service misses the peer's heartbeats (here ~20 s), then fails with
    # UnavailableError (status 1). A launcher stops it and starts both workers again.
    chief.kill()
    reruns = start(stop=False)
    codes = [w.wait(deadline) for w in reruns]
    assert codes == [0, 0], [w.log[-3000:] for w in reruns]
  finally:
    for pair in jobs:
      for w in pair:
        w.kill()
  for w in reruns:
    assert _epochs(w) == [1, 2], w.log[-3000:]
  assert not any(b.exists() for b in backups)  # Removed by Keras on each worker.
  for i in range(2):
    _assert_same(dict(np.load(tmp_path / f"out{i}.npz")), uninterrupted)
