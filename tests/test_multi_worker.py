"""Two worker processes on 127.0.0.1 train with MultiWorkerMirroredStrategy (TF_CONFIG).

Both must end with identical parameters and state (dropout masks differ per worker,
BatchNorm statistics are all-reduced), and only the chief writes checkpoints, events
and metrics into its workdir; the other worker's temporary checkpoint folder is removed.
Faults (slow): SIGTERM to either or both workers and kill -9 of either, each followed by
the same command, lose nothing beyond the chunk in flight and end bitwise equal to an
uninterrupted run (docs/distributed.md, "Preemption, lost workers and restarts").
"""
import json
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf

from cluster import REPO, Job, loopback_workers, worker_env
TIMEOUT_S = 240   # Both workers, start-up included; they are killed if it passes.

WORKER = textwrap.dedent("""
    import json, sys
    import numpy as np
    from hypernet.training import loop
    from configs import digits_hyper

    workdir, out = sys.argv[1], sys.argv[2]
    trainers = []

    class RecordingTrainer(loop.Trainer):
      def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        trainers.append(self)

    loop.Trainer = RecordingTrainer
    c = digits_hyper.get_config()
    c.distribution = "multi_worker"
    c.jit_compile = "false"
    c.num_steps = 4
    c.batch_size = 32
    c.log_every = 2
    c.eval_every = 4
    c.checkpoint_every = 2
    c.model.conv_widths = (8,)
    c.model.dense_widths = (16,)
    c.model.batch_norm = True
    c.hypernet.chunk_size = 256
    c.hypernet.hidden = (16,)
    metrics = loop.train_and_evaluate(c, workdir)
    t = trainers[0]
    variables = t.variables + t.task.target.non_trainable_variables
    np.savez(out, **{v.path: np.asarray(v.numpy()) for v in variables})
    print("RESULT", json.dumps({"metrics": metrics, "replicas": t.num_replicas,
                                "chief": t.is_chief}))
""")


def _checkpoint_values(prefix):
  reader = tf.train.load_checkpoint(str(prefix))
  return {n: reader.get_tensor(n) for n, _ in tf.train.list_variables(str(prefix))
          if not n.startswith(("save_counter", "_CHECKPOINTABLE"))}


@pytest.mark.slow
def test_two_workers_agree_and_only_the_chief_writes(tmp_path):
  workers = loopback_workers()
  procs = []
  for i in range(2):
    env = worker_env(tmp_path / f"tmp{i}", workers, i)
    procs.append(subprocess.Popen(
        [sys.executable, "-c", WORKER, str(tmp_path / f"wd{i}"), str(tmp_path / f"p{i}.npz")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  outputs = []
  try:
    for p in procs:
      outputs.append(p.communicate(timeout=TIMEOUT_S)[0])
  except subprocess.TimeoutExpired:
    for p in procs:
      p.kill()
    pytest.fail(f"Workers did not finish within {TIMEOUT_S} s.")
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for i, (p, out) in enumerate(zip(procs, outputs)):
    assert p.returncode == 0, f"worker {i} failed:\n{out[-4000:]}"
  results = [json.loads(o.split("RESULT ", 1)[1].splitlines()[0]) for o in outputs]
  assert [r["replicas"] for r in results] == [2, 2]
  assert [r["chief"] for r in results] == [True, False]
  assert results[0]["metrics"]["step"] == results[1]["metrics"]["step"] == 4
  assert results[0]["metrics"]["loss"] == pytest.approx(results[1]["metrics"]["loss"], abs=1e-6)

  chief, other = np.load(tmp_path / "p0.npz"), np.load(tmp_path / "p1.npz")
  assert sorted(chief.files) == sorted(other.files)
  assert any(k.endswith("moving_mean") for k in chief.files)
  assert any(k.endswith("seed_generator_state") for k in chief.files)
  for k in chief.files:
    np.testing.assert_array_equal(other[k], chief[k], err_msg=k)

  wd0, wd1 = tmp_path / "wd0", tmp_path / "wd1"
  assert sorted(f.name for f in (wd0 / "checkpoints").iterdir() if f.name.startswith("ckpt-4"))
  assert list((wd0 / "train").glob("events.out.tfevents.*"))
  assert (wd0 / "final_metrics.json").is_file() and (wd0 / "config.json").is_file()
  assert not wd1.exists() or not any(wd1.rglob("*")), sorted(map(str, wd1.rglob("*")))
  assert not list((tmp_path / "tmp1").glob("hypernet-*"))   # The worker's temp folder is gone.


# -- faults: SIGTERM to any worker, kill -9 of either, then the same command again -------
FAULT_STEPS = 160
FAULT_CONFIG = {  # digits_hyper, small.
    "jit_compile": "false", "num_steps": FAULT_STEPS, "batch_size": 32, "log_every": 5,
    "console_every": 5,  # The test waits for progress lines of given steps.
    "checkpoint_every": 20, "eval_every": 0, "summaries.every": 0, "model.dropout": 0.0,
    "model.conv_widths": (8,), "model.dense_widths": (16,), "hypernet.chunk_size": 256,
    "hypernet.hidden": (16,)}
FAULT_FLAGS = ["--config=configs/digits_hyper.py", "--config.distribution=multi_worker"] + [
    f"--config.{k}={v}".replace(" ", "") for k, v in FAULT_CONFIG.items()]
RESTART = 143  # hypernet.training.checkpoints.EXIT_RESTART


def _worker(index, workers, workdir, tmp):
  """``python -m hypernet.train`` as one worker of a 2-worker loopback cluster."""
  return Job([sys.executable, "-m", "hypernet.train", f"--workdir={workdir}", *FAULT_FLAGS],
             worker_env(tmp, workers, index))


def _start_pair(workdir, tmp_path):
  workers = loopback_workers()
  return [_worker(i, workers, workdir, tmp_path / f"tmp{i}") for i in range(2)], workers


def _latest_step(workdir):
  name = tf.train.latest_checkpoint(str(workdir / "checkpoints"))
  return int(name.rsplit("-", 1)[1]) if name else None


@pytest.mark.slow
def test_faults_on_either_worker_lose_nothing_and_resume_to_the_uninterrupted_run(tmp_path):
  """One run of 2 workers, faulted twice and restarted with the same command each time:
  SIGTERM to the non-chief, then kill -9 of the chief. A SIGTERM stops both workers at
  one step that the chief saves (status 143); the killed chief's peer says in one line
  whom it lost and where the rerun resumes (status 143). The last rerun ends bitwise equal
  to an uninterrupted run. (A SIGTERM to the chief, or to both, takes the same path:
  every worker reports its signals in one collective at each chunk boundary,
  Trainer.agree_stop; test_fault_tolerance covers one process's SIGTERM. A killed
  non-chief is reported by the chief in the same line, the same code with the other
  index; the checkpoint folder it leaves behind is removed when it starts again:
  test_fault_tolerance::test_a_killed_workers_checkpoint_folder_is_removed_when_it_starts_again.)"""
  deadline = time.time() + 900
  wd = tmp_path / "run"
  pairs = []
  try:
    resume_at = 0
    for fault in ("term1", "kill0"):
      pair, workers = _start_pair(wd, tmp_path)
      pairs.append(pair)
      if resume_at:
        for w in pair:
          w.wait_for(rf"Resumed from \S*ckpt-{resume_at} at step {resume_at}\b", deadline)
      first = resume_at + 10
      if fault.startswith("kill"):  # Past a periodic save, so that one is resumed from.
        first = (resume_at // 20 + 1) * 20 + 5
      pair[0].wait_for(rf"step {first}/{FAULT_STEPS}", deadline)
      if fault.startswith("term"):
        target = {"term1": [1], "term0": [0], "term_both": [1, 0]}[fault]
        for k, i in enumerate(target):
          if k:
            time.sleep(1.5)
          if pair[i].proc.poll() is None:
            pair[i].proc.send_signal(signal.SIGTERM)
        codes = [w.wait(deadline) for w in pair]
        assert codes == [RESTART, RESTART], (fault, codes, pair[0].log[-3000:],
                                             pair[1].log[-3000:])
        lines = [w.wait_for(r"Stopped by SIGTERM \(sent to (.*)\) at step (\d+); saved "
                            r"checkpoint (\S+)\. Rerun the same command on every worker",
                            deadline) for w in pair]
        assert f"worker {target[0]} ({workers[target[0]]})" in lines[0].group(1), fault
        got = [int(m.group(2)) for m in lines]
        assert got[0] == got[1] > resume_at, (fault, got)  # Both stopped at one step...
        assert _latest_step(wd) == got[0], fault             # ...which the chief saved.
        assert lines[1].group(3) == str(wd / "checkpoints" / f"ckpt-{got[0]}")
        resume_at = got[0]
        for i in range(2):  # Exit handlers ran: AutoGraph's temporary files are gone.
          assert not list((tmp_path / f"tmp{i}").glob("__autograph_generated_file*"))
      else:
        victim = int(fault[-1])
        survivor = pair[1 - victim]
        pair[victim].proc.send_signal(signal.SIGKILL)
        assert pair[victim].wait(deadline) == -signal.SIGKILL
        assert survivor.wait(deadline) == RESTART, survivor.log[-3000:]
        saved = _latest_step(wd)
        assert saved >= first - 5, (fault, saved)
        line = survivor.wait_for(r"Lost worker (\d) \(([\d.:]+)\).*Rerun the same command on "
                                 r"every worker: it resumes from \S*ckpt-(\d+)", deadline)
        assert (int(line.group(1)), line.group(2), int(line.group(3))) == (
            victim, workers[victim], saved), line.group(0)
        resume_at = saved
      for w in pair:
        assert "Traceback" not in w.log, w.log[-3000:]

    final, _ = _start_pair(wd, tmp_path)
    pairs.append(final)
    assert [w.wait(deadline) for w in final] == [0, 0], final[0].log[-3000:]
    assert re.search(rf"Resumed from \S*ckpt-{resume_at} at step {resume_at}\b", final[1].log)
    assert re.search(rf"Resumed from \S*ckpt-{resume_at} at step {resume_at}\b", final[0].log)
    # The non-chief's checkpoint copy is gone with the run.
    assert not list((tmp_path / "tmp1").glob("hypernet-*"))
  finally:
    for pair in pairs:
      for w in pair:
        if w.proc.poll() is None:
          w.proc.kill()
          w.proc.wait()
  # The uninterrupted run: 2 replicas in this process (MirroredStrategy on the two logical
  # CPUs of conftest) take the same steps as 2 workers, bit for bit (a sum of two numbers
  # does not depend on their order).
  from hypernet.training import loop  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, str(REPO / "configs"))
  import digits_hyper  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  config = digits_hyper.get_config()
  config.update_from_flattened_dict(dict(FAULT_CONFIG, distribution="mirrored"))
  assert loop.train_and_evaluate(config, str(tmp_path / "ref"))["step"] == FAULT_STEPS
  ref_values = _checkpoint_values(tmp_path / "ref" / "checkpoints" / f"ckpt-{FAULT_STEPS}")
  run_values = _checkpoint_values(wd / "checkpoints" / f"ckpt-{FAULT_STEPS}")
  assert ref_values.keys() == run_values.keys() and len(ref_values) >= 10
  for k in ref_values:
    np.testing.assert_array_equal(ref_values[k], run_values[k], err_msg=k)
