"""End-to-end: every hypernetwork kind trains through the one train loop on digits, with
its parameter counts and compression ratio logged in final_metrics.json (the main job
itself, digits_hyper as committed: tests/test_train.py)."""
import importlib.util

import numpy as np
import pytest

from conftest import REPO_ROOT
from hypernet.core import functional
from hypernet.training import loop


def load_config(name):
  spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "configs" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


@pytest.mark.parametrize("name,steps,min_accuracy", [
    ("digits_mlp", 400, 0.93),
    ("digits_static", 400, 0.90),
    ("digits_conditional", 600, 0.60),
])
def test_each_kind_trains_on_digits(tmp_path, name, steps, min_accuracy):
  config = load_config(name)
  config.num_steps = steps
  config.log_every = config.eval_every = config.checkpoint_every = steps
  result = loop.train_and_evaluate(config, str(tmp_path))
  assert result["accuracy"] >= min_accuracy, result
  assert result["params/source"] > 0 and result["params/generated"] > 0
  assert result["params/compression_ratio"] == pytest.approx(
      result["params/generated"] / result["params/source"])
  if name == "digits_conditional":  # every task learned, not just some
    assert min(result[f"accuracy/task{t}"] for t in range(4)) >= min_accuracy - 0.15


def test_batchnorm_target_state_applied_by_train_loop(tmp_path):
  config = load_config("digits_hyper")
  config.model.batch_norm = True
  config.hypernet.targets = "conv*/*,bn*/*,dense*/*,head/*"   # gamma/beta generated too
  config.num_steps = config.log_every = config.eval_every = config.checkpoint_every = 50
  trainer = loop.Trainer(config, str(tmp_path))
  assert "bn1/gamma" in trainer.task.source.generated_paths
  trainer.train_chunk(trainer.train_iterator(0), 50)
  mean = functional.variable_paths(trainer.task.target)["bn1/moving_mean"].numpy()
  # The moving mean moved from 0 towards the conv outputs' batch means: 1 - 0.99^50 of it.
  assert np.all(np.isfinite(mean)) and np.max(np.abs(mean)) > 1e-3
