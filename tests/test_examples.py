"""Every script in examples/ runs at a small step count and reaches its result.

Each example's ``main()`` is the code a user copies; the thresholds are far above what an
untrained model gets (chance: 10% on digits, 20% on 5-way tasks, 50% per binary task).
"""
import importlib.util
import os

import numpy as np
import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples")


def _load(name):
  spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_every_example_is_tested_here():
  scripts = sorted(f[:-3] for f in os.listdir(EXAMPLES) if f.endswith(".py"))
  with open(__file__, encoding="utf-8") as f:
    source = f.read()
  assert scripts and all(f'_load("{s}")' in source for s in scripts), scripts


def test_hypernetwork_own_model_learns_digits():
  result = _load("hypernetwork_own_model").main(steps=100)
  assert result["last_loss"] < 0.3 * result["first_loss"], result
  assert result["accuracy"] > 0.85, result  # chance: 0.10


def test_hypernetwork_head_only_trains_the_rest_beside_it():
  result = _load("hypernetwork_head_only").main(steps=250)
  assert result["generated"] == 24 * 32 + 32 + 32 * 10 + 10  # fc and logits only
  assert result["rest"] == 4  # c1 and c2 kernels and biases, trained directly
  assert result["last_loss"] < 0.3 * result["first_loss"], result
  assert result["accuracy"] > 0.8, result  # chance: 0.10


@pytest.mark.parametrize("learner,threshold", [("maml", 0.4), ("anil", 0.5)])
def test_meta_learning_own_tasks_adapts(learner, threshold):
  result = _load("meta_learning_own_tasks").main(steps=60, learner=learner)
  assert abs(result["accuracy_before"] - 0.2) < 0.05, result  # labels permuted per task
  assert result["accuracy_after"] > threshold, result


def test_continual_hypernetwork_keeps_earlier_tasks():
  module = _load("continual_hypernetwork")
  kept = module.main(steps_per_task=100, beta=0.05)
  forgot = module.main(steps_per_task=100, beta=0.0)
  assert min(kept["final"]) > 0.9, kept
  assert kept["forgetting"] < 0.02, kept
  assert forgot["forgetting"] > kept["forgetting"] + 0.03, (kept, forgot)
  assert np.mean(forgot["final"]) < kept["mean_final"], (kept, forgot)


# -- examples/own_hypernetwork: a user-written hypernetwork kind outside the package -------
OWN_KIND = os.path.join(EXAMPLES, "own_hypernetwork")


def _own_kind_env():
  repo = os.path.dirname(EXAMPLES)
  return dict(os.environ, PYTHONPATH=os.pathsep.join(
      [repo, OWN_KIND, os.environ.get("PYTHONPATH", "")]))


def test_own_hypernetwork_kind_trains_through_the_command_line(tmp_path):
  """config.hypernet.kind = "lowrank_hypernet:LowRankHypernetwork" with the kind's own
  field config.hypernet.rank (overridden on the command line): 300 steps on the digits."""
  import json  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  out = subprocess.run(
      [sys.executable, "-m", "hypernet.train", "--config=config.py", f"--workdir={tmp_path}",
       "--config.num_steps=300", "--config.eval_every=0", "--config.hypernet.rank=8"],
      cwd=OWN_KIND, env=_own_kind_env(), capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stderr[-3000:]
  with open(tmp_path / "final_metrics.json") as f:
    result = json.load(f)
  assert result["step"] == 300 and result["accuracy"] > 0.85, result  # chance: 0.10
  # Rank 8 factors of every weight of the digits CNN (conv 3x3x1x32, 3x3x32x64, dense
  # 256x64, head 64x10 and the biases): (rows + cols) * 8 each.
  shapes = [(9, 32), (1, 32), (288, 64), (1, 64), (256, 64), (1, 64), (64, 10), (1, 10)]
  assert result["params/source"] == sum((r + c) * 8 for r, c in shapes), result
  assert result["params/generated"] == result["params/target"]


def _run_here(script, argv, monkeypatch, capsys) -> str:
  """Runs ``python script *argv`` in this process (what is checked is the training, not
  the process; TensorFlow is loaded once): its stdout. sys.path is restored after."""
  import runpy  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(sys, "argv", [script, *argv])
  monkeypatch.setattr(sys, "path", list(sys.path))
  capsys.readouterr()
  runpy.run_path(script, run_name="__main__")
  return capsys.readouterr().out


def test_own_hypernetwork_kind_trains_through_keras_fit(tmp_path, monkeypatch, capsys):
  """hn.keras.HyperModel(target, LowRankHypernetwork).fit(...), then save / load_model."""
  out = _run_here(os.path.join(OWN_KIND, "keras_fit.py"), ["--epochs=12", f"--out={tmp_path}"],
                  monkeypatch, capsys)
  accuracy = float(out.strip().rpartition(": ")[2])
  assert accuracy > 0.85, out[-2000:]  # 397 held-out digits; chance: 0.10
  assert (tmp_path / "lowrank.keras").exists()


def test_generated_adapters_fit_new_tasks_on_a_frozen_transformer():
  result = _load("generated_adapters").main(epochs=7)  # ~18 s on 2 cores; 30 as shipped
  before, after = result["before"], result["after"]
  assert after[0] > 0.85, result            # the base's own task stays learned
  for k in (1, 3):                          # mirrored, transposed: the base fails them
    assert after[k] > before[k] + 0.3 and after[k] > 0.75, result
  assert abs(result["merged"] - after[2]) < 1e-6, result   # the merged plain model
