"""The README's commands and code run as written."""
import os
import re

import numpy as np
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme():
  with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
    return f.read()


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
  bash = re.search(r"```bash\n(.*?)```", _readme(), re.S).group(1)
  commands = [l for l in bash.splitlines() if l and not l.startswith("#")]
  assert commands[0].startswith("pip install -e . && python -m hypernet.train "
                                "--config=configs/digits_hyper.py")
  assert commands[1] == 'pip install -e ".[test]" && python -m pytest -q'
  with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
    assert commands[1] in f.read()


def test_readme_python_example_trains_a_hypernetwork():
  code = re.search(r"```python\n(.*?)```", _readme(), re.S).group(1)
  rng = np.random.default_rng(0)
  scope = {"images": tf.constant(rng.random((4, 28, 28, 1)), tf.float32),
           "labels": tf.constant([0, 1, 2, 3])}
  exec(code, scope)  # pylint: disable=exec-used
  grads, hnet = scope["grads"], scope["hnet"]
  assert len(grads) == len(hnet.trainable_variables)
  assert all(g is not None and np.isfinite(g.numpy()).all() for g in grads)
  assert float(tf.linalg.global_norm(grads)) > 0
