"""Processes of a test: workers of a loopback cluster (TF_CONFIG on free 127.0.0.1
ports) whose output a thread collects, so a test can wait for a line, signal the
process and read what it printed (tests/test_multi_worker.py,
tests/test_keras_restart.py)."""
import json
import os
import pathlib
import re
import socket
import subprocess
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def free_ports(n):
  socks = [socket.socket() for _ in range(n)]
  for s in socks:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in socks]
  for s in socks:
    s.close()
  return ports


def loopback_workers(n=2):
  """``["127.0.0.1:PORT", ...]``: the cluster's worker addresses."""
  return [f"127.0.0.1:{p}" for p in free_ports(n)]


def worker_env(tmp, workers=None, index=None):
  """The environment of a CPU-only test process run from the repository, with its own
  ``TMPDIR`` ``tmp`` (created) and, given ``workers``, ``TF_CONFIG`` for worker
  ``index`` of that cluster."""
  tmp = pathlib.Path(tmp)
  tmp.mkdir(parents=True, exist_ok=True)
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow", TMPDIR=str(tmp))
  if workers is not None:
    env["TF_CONFIG"] = json.dumps({"cluster": {"worker": list(workers)},
                                   "task": {"type": "worker", "index": index}})
  return env


class Job:
  """``command`` run from the repository with ``env``; one stream (stderr, or stdout and
  stderr together) is collected line by line by a thread."""

  def __init__(self, command, env, stream="stderr"):
    out = subprocess.PIPE if stream == "stdout" else subprocess.DEVNULL
    err = subprocess.STDOUT if stream == "stdout" else subprocess.PIPE
    self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=err,
                                 text=True)
    self.lines = []
    self._reader = threading.Thread(
        target=self._read, args=(self.proc.stdout if stream == "stdout" else self.proc.stderr,),
        daemon=True)
    self._reader.start()

  def _read(self, stream):
    for line in stream:
      self.lines.append(line)

  @property
  def log(self):
    return "".join(self.lines)

  def wait_for(self, pattern, deadline):
    while time.time() < deadline:
      for line in list(self.lines):
        m = re.search(pattern, line)
        if m:
          return m
      if self.proc.poll() is not None:
        self._reader.join(5)
        m = re.search(pattern, self.log)
        if m:
          return m
        raise AssertionError(f"exited ({self.proc.returncode}) before {pattern!r}:\n"
                             f"{self.log[-3000:]}")
      time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {pattern!r}:\n{self.log[-3000:]}")

  def wait(self, deadline):
    try:
      self.proc.wait(max(deadline - time.time(), 1))
    finally:
      self.kill()
    self._reader.join(5)
    return self.proc.returncode

  def kill(self):
    if self.proc.poll() is None:
      self.proc.kill()
      self.proc.wait()
