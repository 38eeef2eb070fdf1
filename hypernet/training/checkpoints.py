"""Never lose a run: the workdir lock, graceful SIGTERM/SIGINT, checkpoint lookup.

* :class:`WorkdirLock` -- one training job per workdir. An exclusive ``fcntl.flock`` on
  ``workdir/lock``: the kernel drops it when the process ends in any way (``kill -9``
  included), so a crashed job never leaves a stale lock behind.
* :class:`SignalCatcher` -- records SIGTERM / SIGINT instead of dying, so the train loop
  can finish the current chunk of steps, save a checkpoint and then exit *by the same
  signal* (exit status -15 / KeyboardInterrupt), as schedulers expect.
* :func:`resolve_checkpoint` -- the latest or a named checkpoint of a workdir.

Checkpoints themselves are written by ``tf.train.CheckpointManager``: the data and index
files are complete before the ``checkpoint`` state file is atomically replaced to name
them, so a process killed at any moment leaves the state file pointing at a complete
checkpoint (tested by killing a job that checkpoints every step).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from typing import Optional, Sequence, Union

from absl import logging
import tensorflow as tf

LOCK_NAME = "lock"


class WorkdirInUseError(RuntimeError):
  """Another live process holds the workdir's lock."""


class WorkdirLock:
  """Exclusive lock on a workdir, held while a training job runs.

  Args:
    workdir: the job's output folder (created if missing).
    enabled: ``False`` makes the lock a no-op (``config.fault.lock_workdir``; non-chief
      workers of a multi-worker job share the chief's workdir and do not lock it).

  Only local folders are locked: on ``gs://``-style paths (no ``flock``) the lock logs a
  warning and does nothing.

  Raises (from ``acquire`` / ``with``):
    WorkdirInUseError: another process holds the lock; the message names its pid, host
      and start time.
  """

  def __init__(self, workdir: str, enabled: bool = True):
    self.workdir = workdir
    self.path = os.path.join(workdir, LOCK_NAME)
    self.enabled = enabled
    self._fd: Optional[int] = None
    self._created: list = []

  def acquire(self) -> "WorkdirLock":
    if not self.enabled:
      return self
    if "://" in self.workdir:
      logging.warning("Workdir %s is not a local folder: it is not locked against a second "
                      "job.", self.workdir)
      return self
    try:
      import fcntl  # pylint: disable=g-import-not-at-top
    except ImportError:  # Not a POSIX system.
      logging.warning("No fcntl: workdir %s is not locked against a second job.", self.workdir)
      return self
    # The folders this lock creates (the workdir and any missing parents, deepest first),
    # for remove_if_unused.
    missing, folder = [], os.path.abspath(self.workdir)
    while not os.path.exists(folder):
      missing.append(folder)
      folder = os.path.dirname(folder)
    os.makedirs(self.workdir, exist_ok=True)
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
      except ValueError:
        holder = {}
      os.close(fd)
      who = (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started "
             f"{holder.get('started', '?')}") if holder else "another process"
      raise WorkdirInUseError(
          f"Workdir {self.workdir} is in use by another training job ({who}). Two jobs "
          "writing one workdir would overwrite each other's checkpoints. Wait for that job, "
          "stop it (it checkpoints on SIGTERM), or pass another --workdir.") from None
    info = {"pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)
    self._fd = fd
    self._created = missing
    return self

  def remove_if_unused(self) -> None:
    """While still holding the lock: if this lock created the workdir and it holds nothing
    but the lock file (a job that failed while building), removes the lock file, the
    workdir and the parents the lock created, so a failed first run leaves nothing.
    Folders that existed before, or that hold anything else, are kept."""
    if self._fd is None or not self._created:
      return
    if set(os.listdir(self.workdir)) != {LOCK_NAME}:
      return
    os.remove(self.path)  # Holding the lock: a second job could not have taken it.
    for folder in self._created:
      try:
        os.rmdir(folder)
      except OSError:  # Not empty (another job's files): keep it and its parents.
        break

  def release(self) -> None:
    """Releases the lock (the file stays: removing it would race with a new job)."""
    if self._fd is not None:
      import fcntl  # pylint: disable=g-import-not-at-top
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None

  def __enter__(self):
    return self.acquire()

  def __exit__(self, *exc):
    self.release()


_EXITED_BY_SIGNAL: Optional[int] = None


def exited_by_signal() -> Optional[int]:
  """The signal a :class:`SignalCatcher` re-delivered by :meth:`SignalCatcher.exit_by_signal`
  (after the train loop saved a checkpoint and said so), else ``None``."""
  return _EXITED_BY_SIGNAL


class SignalCatcher:
  """Records termination signals so that training can checkpoint before exiting.

  Inside ``with SignalCatcher() as signals:`` a SIGTERM or SIGINT only sets
  ``signals.received`` (the first signal number); the train loop polls it between chunks
  of steps, saves a checkpoint and calls :meth:`exit_by_signal`. A *second* signal of the
  same kind restores the previous handler and re-delivers it at once (Ctrl-C twice
  forces an exit without waiting for the checkpoint).

  Python runs signal handlers in the main thread between bytecodes, so the flag is set
  when the running ``tf.function`` chunk returns: the reaction time is one chunk of steps
  (at most ``config.log_every`` steps).

  A signal the process was started with *ignored* stays ignored (as Python itself leaves
  an ignored SIGINT alone): a non-interactive shell starts background jobs (``cmd &``)
  with SIGINT ignored, so that a Ctrl-C meant for the foreground does not stop them.

  Args:
    signals: the signal numbers to catch.
    enabled: ``False`` (or not in the main thread, where handlers cannot be installed)
      makes the catcher a no-op.
  """

  def __init__(self, signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
               enabled: bool = True):
    self.signals = tuple(signals)
    self.enabled = enabled and threading.current_thread() is threading.main_thread()
    self.received: Optional[int] = None
    self._previous = {}

  def _handler(self, signum, frame):
    del frame
    if self.received == signum:  # Asked twice: stop waiting for the checkpoint.
      logging.warning("Second %s: exiting without a checkpoint.", signal.Signals(signum).name)
      self._restore()
      signal.raise_signal(signum)
      return
    if self.received is None:
      self.received = signum
      logging.warning("Caught %s: the run stops after the current chunk of steps and saves "
                      "a checkpoint.", signal.Signals(signum).name)

  def __enter__(self):
    if self.enabled:
      for s in self.signals:
        if signal.getsignal(s) is not signal.SIG_IGN:
          self._previous[s] = signal.signal(s, self._handler)
    return self

  def _restore(self):
    for s, handler in self._previous.items():
      signal.signal(s, handler if handler is not None else signal.SIG_DFL)
    self._previous = {}

  def __exit__(self, *exc):
    self._restore()

  def exit_by_signal(self) -> None:
    """Restores the previous handlers and re-delivers the received signal to this process.

    With default handlers, SIGTERM ends the process (exit status ``-15``, i.e. 143 in a
    shell) and SIGINT raises ``KeyboardInterrupt``. Does nothing if no signal came.

    Raises:
      KeyboardInterrupt: SIGINT with Python's default handler.
      SystemExit: ``128 + signum`` when the previous handler returned (a handler of the
        caller's own), so that a stopped run never carries on as if it had finished.
    """
    global _EXITED_BY_SIGNAL
    signum = self.received
    self._restore()
    if signum is not None:
      _EXITED_BY_SIGNAL = signum
      signal.raise_signal(signum)
      raise SystemExit(128 + signum)


def checkpoint_dir(workdir: str) -> str:
  """Where the train loop writes checkpoints: ``workdir/checkpoints``."""
  return os.path.join(workdir, "checkpoints")


def resolve_checkpoint(workdir: str, checkpoint: Union[None, int, str] = None) -> str:
  """Returns the checkpoint prefix to restore.

  Args:
    workdir: a training workdir.
    checkpoint: ``None`` or ``""`` for the latest; a step number (``1000`` or ``"1000"``)
      for ``workdir/checkpoints/ckpt-1000``; or a checkpoint prefix path.

  Raises:
    FileNotFoundError: there is no (such) checkpoint; the message lists those present.
  """
  folder = checkpoint_dir(workdir)
  if checkpoint in (None, ""):
    latest = tf.train.latest_checkpoint(folder)
    if latest is None:
      raise FileNotFoundError(f"No checkpoint in {folder}: train first (python -m "
                              f"hypernet.train --workdir={workdir} ...).")
    return latest
  text = str(checkpoint)
  path = os.path.join(folder, f"ckpt-{text}") if text.isdigit() else text
  if not tf.io.gfile.exists(path + ".index"):
    state = tf.train.get_checkpoint_state(folder)
    present = list(state.all_model_checkpoint_paths) if state else []
    raise FileNotFoundError(f"Checkpoint {path} does not exist; present: {present}.")
  return path
