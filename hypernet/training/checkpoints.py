"""Never lose a run: the workdir lock (:class:`WorkdirLock`), graceful SIGTERM / SIGINT
(:class:`SignalCatcher`), the checkpoints a resume may use and where an unreadable one
is set aside, and how a resumable run ends (:class:`Preempted`, :class:`PeerLost`: exit
status 143). Behaviour on signals, kill -9 and full disks: docs/observability.md.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
from typing import Optional, Sequence, Union

from absl import logging
import tensorflow as tf

from hypernet.training.workdir import Workdir

LOCK_NAME = Workdir.LOCK
# The exit status of a run that stopped early and resumes when rerun with the same command
# (preempted by SIGTERM on any worker, or a lost peer worker): 128 + SIGTERM, what a shell
# reports for a process ended by SIGTERM and what TensorFlow's PreemptionCheckpointHandler
# exits with on GCE (failure_handling_util._RESTARTABLE_EXIT_CODE). A bug or a user error
# exits 1.
EXIT_RESTART = 143
UNREADABLE_DIR = Workdir.UNREADABLE


class Preempted(SystemExit):
  """A stop asked for by SIGTERM (on this or another worker): every worker stopped at the
  same step, the chief saved it, rerunning the same command resumes there.

  A ``SystemExit`` with code :data:`EXIT_RESTART`: uncaught, it ends the process with
  status 143 and no traceback, after exit handlers ran. ``str()`` is the one-line reason.
  Attributes: ``step`` (the step saved), ``checkpoint`` (its path in the workdir).
  """

  def __init__(self, message: str, step: Optional[int] = None,
               checkpoint: Optional[str] = None):
    super().__init__(EXIT_RESTART)
    self.message, self.step, self.checkpoint = message, step, checkpoint

  def __str__(self):
    return self.message


class PeerLost(Preempted):
  """Another worker of a multi-worker run stopped answering (killed, preempted, its
  machine lost): this worker stops too. Rerunning the same command on every worker
  resumes from the chief's latest checkpoint (``checkpoint``). Exit status 143."""


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
    self.path = Workdir(workdir).lock
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
  ``signals.received`` (the first signal number); the train loop shares it with the
  other workers between chunks of steps, saves a checkpoint and then raises
  :class:`Preempted` (SIGTERM) or calls :meth:`exit_by_signal` (SIGINT). A *second*
  signal of the same kind before the stop restores the previous handler and re-delivers
  it at once (Ctrl-C twice forces an exit without waiting for the checkpoint); once the
  checkpoint is saved, :meth:`ignore_further_sigterm` keeps a late SIGTERM from cutting
  the exit short.

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

  def ignore_further_sigterm(self) -> None:
    """After the stop's checkpoint: SIGTERM is ignored until the process exits (a
    scheduler that signals every worker of a job reaches some of them while they exit),
    so the exit status stays :data:`EXIT_RESTART`. ``SIG_IGN``, not a Python handler:
    Python resets its own handlers to the default when it finalises, while TensorFlow's
    runtime still shuts down."""
    if self.enabled and signal.SIGTERM in self.signals:
      signal.signal(signal.SIGTERM, signal.SIG_IGN)

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
  return Workdir(workdir).checkpoints


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
  path = Workdir(workdir).checkpoint(text) if text.isdigit() else text
  if not tf.io.gfile.exists(path + ".index"):
    state = tf.train.get_checkpoint_state(folder)
    present = list(state.all_model_checkpoint_paths) if state else []
    raise FileNotFoundError(f"Checkpoint {path} does not exist; present: {present}.")
  return path


def step_of(prefix: str) -> Optional[int]:
  """The step of a checkpoint prefix ``.../ckpt-<N>`` (``None`` for another name)."""
  tail = os.path.basename(prefix).rsplit("-", 1)[-1]
  return int(tail) if tail.isdigit() else None


def _step_of(prefix: str) -> int:
  step = step_of(prefix)
  return -1 if step is None else step


def restore_candidates(folder: str) -> list:
  """The checkpoints a resume may use, newest first: ``[(prefix, problem)]``.

  Those the ``checkpoint`` state file lists and those whose ``ckpt-N.index`` file is in
  ``folder`` (a state file naming deleted checkpoints must not hide the older ones).
  ``problem`` is ``None``, or ``"missing"`` when the index or data files are gone.
  """
  state = tf.train.get_checkpoint_state(folder)
  named = list(state.all_model_checkpoint_paths) if state else []
  if state and state.model_checkpoint_path:
    named.append(state.model_checkpoint_path)
  named = [p if os.path.isabs(p) or "://" in p else os.path.join(folder, p) for p in named]
  found = [f[:-len(".index")] for f in tf.io.gfile.glob(os.path.join(folder, "ckpt-*.index"))]
  prefixes = {os.path.join(folder, os.path.basename(p)) for p in named + found}
  out = []
  for p in sorted(prefixes, key=_step_of, reverse=True):
    whole = tf.io.gfile.exists(p + ".index") and tf.io.gfile.glob(p + ".data-*")
    out.append((p, None if whole else "missing"))
  return out


def set_aside(prefix: str) -> str:
  """Moves the files of checkpoint ``prefix`` into ``<its folder>/unreadable/`` (kept for
  inspection, out of the way of resumes and of ``CheckpointManager``'s rotation);
  returns the new prefix."""
  folder = os.path.join(os.path.dirname(prefix), UNREADABLE_DIR)
  tf.io.gfile.makedirs(folder)
  name = os.path.basename(prefix)
  target, n = os.path.join(folder, name), 1
  while tf.io.gfile.glob(target + ".*"):
    n += 1
    target = os.path.join(folder, f"{name}.{n}")
  for f in tf.io.gfile.glob(prefix + ".*"):
    tf.io.gfile.rename(f, target + f[len(prefix):])
  return target


def write_state(folder: str, prefixes: Sequence[str]) -> None:
  """Rewrites ``folder/checkpoint`` (``CheckpointManager``'s state file) to list
  ``prefixes`` (oldest first; the last is the latest), or removes it when there are
  none. Written to a temporary file, then renamed over the old one."""
  path = os.path.join(folder, "checkpoint")
  if not prefixes:
    if tf.io.gfile.exists(path):
      tf.io.gfile.remove(path)
    return
  names = [os.path.basename(p) for p in prefixes]
  # With timestamps (in order, after last_preserved_timestamp), or CheckpointManager
  # would not count the listed checkpoints for its rotation.
  now = time.time()
  text = (f'model_checkpoint_path: "{names[-1]}"\n'
          + "".join(f'all_model_checkpoint_paths: "{n}"\n' for n in names)
          + "".join(f"all_model_checkpoint_timestamps: {now - len(names) + i:.3f}\n"
                    for i in range(len(names)))
          + f"last_preserved_timestamp: {now - len(names) - 1:.3f}\n")
  with tf.io.gfile.GFile(path + ".tmp", "w") as f:
    f.write(text)
  tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def unreadable(prefix: str) -> Optional[str]:
  """Why checkpoint ``prefix`` cannot be read, or ``None`` when every saved tensor reads
  back (TensorFlow checks each one's checksum as it reads it). Reads the checkpoint
  without restoring it, so that a bad one leaves the model untouched: a truncated data
  file raises ``IndexError``, flipped bytes an ``OpError`` ("Checksum does not
  match")."""
  try:
    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except (tf.errors.OpError, IndexError, ValueError) as e:
    text = str(getattr(e, "message", "") or e).strip()
    line = next((l.strip() for l in text.splitlines() if l.strip()), "")
    line = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", line)
    return f"unreadable ({type(e).__name__}: {line[:300]})"
  return None
