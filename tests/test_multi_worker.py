"""Two worker processes on 127.0.0.1 train with MultiWorkerMirroredStrategy (TF_CONFIG).

Both must end with identical parameters and state (dropout masks differ per worker,
BatchNorm statistics are all-reduced), and only the chief writes checkpoints, events
and metrics into its workdir; the other worker's temporary checkpoint folder is removed.
"""
import json
import os
import pathlib
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
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


def _free_ports(n):
  socks = [socket.socket() for _ in range(n)]
  for s in socks:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in socks]
  for s in socks:
    s.close()
  return ports


@pytest.mark.slow
def test_two_workers_agree_and_only_the_chief_writes(tmp_path):
  workers = [f"127.0.0.1:{p}" for p in _free_ports(2)]
  procs = []
  for i in range(2):
    (tmp_path / f"tmp{i}").mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
               CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow",
               TMPDIR=str(tmp_path / f"tmp{i}"),
               TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                     "task": {"type": "worker", "index": i}}))
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
