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
