"""examples/own_model_and_data: a user's own model and data trained by the real command
line (``python -m hypernet.train``) and by Keras' fit(), as a user runs them."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "own_model_and_data")


def _env():
  env = dict(os.environ)
  env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
  return env


def test_user_module_trains_through_the_command_line(tmp_path):
  out = subprocess.run(
      [sys.executable, "-m", "hypernet.train", "--config=config.py",
       f"--workdir={tmp_path}", "--config.num_steps=400", "--config.eval_every=0"],
      cwd=EXAMPLE, env=_env(), capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  with open(tmp_path / "final_metrics.json") as f:
    result = json.load(f)
  assert result["step"] == 400
  assert result["accuracy"] > 0.85, result  # 599 held-out digits
  assert result["params/generated"] == result["params/target"]  # every weight generated


def test_keras_fit_example_runs(tmp_path, monkeypatch, capsys):
  """``python keras_fit.py --epochs=12 --out=DIR``, run in this process (what is checked is
  the training and its checkpoint, not the process; TensorFlow is loaded once)."""
  import runpy  # pylint: disable=g-import-not-at-top
  script = os.path.join(EXAMPLE, "keras_fit.py")
  monkeypatch.setattr(sys, "argv", [script, "--epochs=12", f"--out={tmp_path}"])
  monkeypatch.setattr(sys, "path", list(sys.path))  # The script's own insert undone after.
  capsys.readouterr()
  runpy.run_path(script, run_name="__main__")
  out = capsys.readouterr().out
  accuracy = float(out.strip().rpartition(": ")[2])
  assert accuracy > 0.7, out[-2000:]
  assert (tmp_path / "best.keras").exists()


def test_keras_guide_code_blocks_run(tmp_path):
  """docs/keras.md's Python blocks, in order, as one script, in a process of its own (its
  MirroredStrategy() would collide with the strategies other tests made in this one)."""
  import re  # pylint: disable=g-import-not-at-top
  with open(os.path.join(REPO, "docs", "keras.md"), encoding="utf-8") as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
  assert len(blocks) == 3
  checks = """
import numpy as np
assert history.history["val_accuracy"][-1] > 0.5, history.history
np.testing.assert_array_equal(reloaded.predict(x[:50], verbose=0),
                              model.predict(x[:50], verbose=0))
assert {"accuracy", "accuracy_before"} <= set(scores), scores
assert adapted_logits.shape == (4, 10, 5), adapted_logits.shape
print("KERAS GUIDE OK")
"""
  script = tmp_path / "keras_guide.py"
  script.write_text("\n".join(blocks) + checks)
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
  out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0 and "KERAS GUIDE OK" in out.stdout, out.stderr[-3000:]