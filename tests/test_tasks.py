"""The Task protocol: abstract members, defaults, wrapped duck-typed tasks and the
one-line errors of a plug-in task that lacks part of it."""
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from hypernet.core import plugins
from hypernet import config_lib

from hypernet.training import loop

from hypernet.tasks import classification, protocol
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # plugin_user_module
import plugin_user_module  # noqa: E402  pylint: disable=g-import-not-at-top

M = "plugin_user_module"


def _config(steps=150, **overrides):
  c = config_lib.base_config()
  c.num_steps = steps
  c.log_every = steps
  c.eval_every = 0
  c.checkpoint_every = steps
  c.summaries.every = 0
  c.summaries.hparams = False
  c.optim.schedule = "constant"
  c.update_from_flattened_dict(overrides)
  return c


def test_defaults_of_the_optional_members():
  task = plugin_user_module.SubclassedRegressionTask(_config())
  assert task.describe() == {} and task.phase_boundaries() == () and task.event_every == 0
  assert task.schedule_steps is None and task.source is None and task.summary_weights() == {}
  assert task.on_event(None, 5, None) is None and task.phase_at(3) is None
  assert task.train_metric_names == ["loss"]  # Default: metric_names.
  task.train_metric_names = ["loss", "extra"]
  assert task.train_metric_names == ["loss", "extra"] and task.metric_names == ["loss"]
  with task.tracing_phase("any"):
    pass


def test_default_train_gradients_differentiate_train_loss():
  """Least squares: d/dw mean((x w - y)^2) = 2 x^T (x w - y) / n, by hand in float64."""
  task = plugin_user_module.SubclassedRegressionTask(_config())
  task._inner.w.assign(tf.ones((5, 1)))  # pylint: disable=protected-access
  x, y = task._inner.x[:8], task._inner.y[:8]  # pylint: disable=protected-access
  loss, sums, state, grads = task.train_gradients({"x": x, "y": y}, 8,
                                                  task.trainable_variables)
  r = x.astype(np.float64) @ np.ones((5, 1)) - y
  np.testing.assert_allclose(float(loss), float(np.mean(r[:, 0] ** 2)), rtol=1e-5)
  np.testing.assert_allclose(grads[0].numpy(), 2 * x.T.astype(np.float64) @ r / 8, rtol=1e-4)
  assert state == {} and float(sums["loss"][1]) == 8
  scaled = task.train_gradients({"x": x, "y": y}, 8, task.trainable_variables,
                                lambda l: 4.0 * l)[3]
  np.testing.assert_allclose(scaled[0].numpy(), 4 * grads[0].numpy(), rtol=1e-6)


def test_a_duck_typed_task_is_wrapped_with_its_own_members_first():
  duck = plugin_user_module.LinearRegressionTask(_config())
  task = protocol.as_task(duck)
  assert isinstance(task, protocol.Task) and task.wrapped is duck
  assert protocol.as_task(task) is task
  assert task.metric_names == ["loss"] and task.describe() == {}
  assert task.trainable_variables == [duck.w] and task.w_true is duck.w_true  # Forwarded.
  assert task.train_loss.__self__ is duck


def test_built_in_tasks_are_tasks():
  from hypernet.tasks import continual_learning, meta_learning  # pylint: disable=g-import-not-at-top
  for cls in (classification.ClassificationTask, classification.MultiTaskClassificationTask,
              continual_learning.ContinualTask, meta_learning.MetaLearningTask):
    assert issubclass(cls, protocol.Task) and not protocol.missing_members(cls), cls


def test_a_subclassed_user_task_runs_through_the_config(tmp_path):
  config = _config(steps=200, **{"task": f"{M}:SubclassedRegressionTask", "batch_size": 32,
                                 "optim.lr": 0.05})
  result = loop.train_and_evaluate(config, str(tmp_path))
  assert result["loss"] < 1e-3 and result["w_error"] < 0.01, result  # final_metrics()


def test_incomplete_tasks_fail_with_one_line(tmp_path):
  with pytest.raises(plugins.PluginError) as info:
    loop.train_and_evaluate(_config(task=f"{M}:IncompleteSubclass"), str(tmp_path / "a"))
  message = str(info.value)
  assert message == (f"config.task='{M}:IncompleteSubclass': IncompleteSubclass lacks "
                     "['trainable_variables', 'trackables', 'train_dataset', 'eval_dataset', "
                     "'eval_sums', 'apply_state', 'train_loss (or train_gradients)'] of the "
                     "task interface (hypernet/tasks/protocol.py; docs/keras.md, 'Plug-ins').")
  assert not (tmp_path / "a").exists()
