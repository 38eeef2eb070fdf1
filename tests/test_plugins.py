"""Plug-ins through the config: user models, keras.applications, TFDS, user data and
user tasks trained by ``train_and_evaluate`` without editing the package, and their
one-line errors (raised before any training and before the workdir is made)."""
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet import data as data_lib
from hypernet.core import functional, plugins
from hypernet import config_lib

from hypernet.training import loop

from hypernet.tasks import targets
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # plugin_user_module

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
  c.optim.lr = 3e-3
  c.update_from_flattened_dict(overrides)
  return c


def test_user_factory_model_trains_with_a_hypernetwork(tmp_path):
  config = _config(**{"model.name": f"{M}:make_mlp", "hypernet.kind": "chunked",
                      "hypernet.targets": "hidden/*,head/*", "hypernet.chunk_size": 256,
                      "hypernet.hidden": (16,)})
  config_lib.validate(config)
  result = loop.train_and_evaluate(config, str(tmp_path))
  assert result["accuracy"] > 0.85, result  # digits, 150 steps of a generated MLP
  assert result["params/generated"] == result["params/target"] == 64 * 32 + 32 + 330


@pytest.mark.parametrize("name,message", [
    (f"{M}:returns_a_string", "returned a str; the factory must return a built keras.Model"),
    (f"{M}:unbuilt", "returned an unbuilt model"),
    (f"{M}:wrong_outputs", r"expected one output \[B, 10\]"),
    (f"{M}:nope", f"module '{M}' has no attribute 'nope'"),
    (f"{M}:make_mpl", f"has no attribute 'make_mpl'; did you mean 'make_mlp'"),
    (f"{M}:no_arguments", r"no_arguments\(\) cannot be called as factory\(input_shape, "
                          r"num_classes\) \(too many positional arguments\)"),
    ("no_such_module_xyz:make", "cannot import module 'no_such_module_xyz'"),
    ("keras.applications.NoSuchNet", "keras.applications has no model 'NoSuchNet'"),
])
def test_model_plugin_errors_name_the_field_before_training(tmp_path, name, message):
  workdir = tmp_path / "run"
  with pytest.raises(ValueError, match=message) as info:
    loop.train_and_evaluate(_config(**{"model.name": name}), str(workdir))
  assert str(info.value).startswith(f"config.model.name={name!r}")
  assert "\n" not in str(info.value)
  assert not workdir.exists()


def test_keras_application_by_name():
  config = _config(**{"model.name": "keras.applications.ResNet50", "model.image_size": 32})
  config_lib.validate(config)
  target = targets.make_target(config.model, (8, 8, 1), 10)
  x = tf.random.stateless_uniform((2, 8, 8, 1), (1, 2))
  logits = target(x, training=False)
  assert logits.shape == (2, 10)
  np.testing.assert_allclose(functional.functional_call(target, None, x, training=False),
                             logits, rtol=1e-5, atol=1e-5)
  assert not np.allclose(np.sum(logits, -1), 1.0)  # Logits, not softmax probabilities.
  paths = functional.variable_paths(target, trainable=True)
  assert "conv1_conv/kernel" in paths and "predictions/kernel" in paths
  weights = {p: 0.5 * v for p, v in paths.items() if p.endswith("predictions/kernel")}
  out = functional.functional_call(target, weights, x, training=False)
  # The head is linear: half the kernel gives the bias plus half of the rest.
  bias = paths["predictions/bias"]
  np.testing.assert_allclose(out - bias, 0.5 * (logits - bias), rtol=1e-4, atol=1e-5)


def _stripes_check(d):
  assert d.image_shape == (6, 6, 1) and d.num_classes == 3
  assert len(d.x_train) == 300 and len(d.x_test) == 101
  assert d.pixel_scale == pytest.approx(1 / 255)


def test_user_data_function_arrays_and_datasets_agree():
  a = data_lib.load_classification(_config(**{"data.name": f"{M}:stripes_arrays"}).data)
  b = data_lib.load_classification(_config(**{"data.name": f"{M}:stripes_datasets"}).data)
  for d in (a, b):
    _stripes_check(d)
  np.testing.assert_array_equal(a.x_train, b.x_train)
  np.testing.assert_array_equal(a.y_test, b.y_test)


def test_user_data_trains_under_mirrored_strategy(tmp_path):
  """Step-indexed batches split over two replicas (two logical CPUs), and the 101 test
  images evaluated in padded batches of 64 (each counted once)."""
  config = _config(steps=60, **{"data.name": f"{M}:stripes_datasets",
                                "distribution": "mirrored", "eval_batch_size": 64,
                                "model.conv_widths": (8,), "model.dense_widths": (16,)})
  result = loop.train_and_evaluate(config, str(tmp_path))
  assert result["accuracy"] == 1.0, result


@pytest.mark.parametrize("name,message", [
    (f"{M}:three_things", "returned a tuple of 3; expected"),
    (f"{M}:flat_images", r"x_train has shape \(300, 36\); expected images"),
    (f"{M}:float_labels", "y_train has dtype float32; expected integer class ids"),
    (f"{M}:needs_a_path", r"needs_a_path\(path\) cannot be called as load\(\) "
                          r"\(missing a required argument: 'path'\)"),
])
def test_data_plugin_errors_name_the_field_before_training(tmp_path, name, message):
  workdir = tmp_path / "run"
  with pytest.raises(ValueError, match=message) as info:
    loop.train_and_evaluate(_config(**{"data.name": name}), str(workdir))
  assert str(info.value).startswith(f"config.data.name={name!r}")
  assert not workdir.exists()


def test_plugin_base_config_carries_nothing_of_the_digits_job(tmp_path):
  """configs/plugin.py: a plug-in run with no augmentation and every weight generated;
  the digits job as a base says what it carries over (augment_shift) in one line, and the
  first console line names the plug-ins."""
  from hypernet.training import cli  # pylint: disable=g-import-not-at-top
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  flags = {"model.name": f"{M}:make_mlp", "data.name": f"{M}:stripes_arrays"}
  config = config_lib.load_config_file(os.path.join(repo, "configs", "plugin.py"))
  config.update_from_flattened_dict(dict(flags, num_steps=60, eval_every=0))
  config_lib.validate(config)
  assert cli.plugin_notices(config) == []
  assert cli.plugins_in(config) == (f" (data.name={M}:stripes_arrays, "
                                    f"model.name={M}:make_mlp)")
  result = loop.train_and_evaluate(config, str(tmp_path / "run"))
  assert result["accuracy"] > 0.9, result  # Three classes of stripes.
  assert result["params/generated"] == result["params/target"]  # targets="*"
  digits = config_lib.load_config_file(os.path.join(repo, "configs", "digits_hyper.py"))
  digits.update_from_flattened_dict(flags)
  (notice,) = cli.plugin_notices(digits)
  assert notice.startswith(f"config.data.augment_shift=1 shifts each training image of "
                           f"config.data.name='{M}:stripes_arrays'")


def test_export_contract_states_the_range_the_data_has(tmp_path):
  """The export's input line reads the stored range from the data: uint8 stripes are
  0..255 scaled by 1/255 in the model; standardised float stripes are taken as they are,
  with their own range (not '0..1')."""
  from hypernet.tasks import protocol  # pylint: disable=g-import-not-at-top
  from hypernet.training import export  # pylint: disable=g-import-not-at-top
  for name, want in (("stripes_arrays", "values 0..255 as the data set stores them (the "
                      "model scales them by 1/255 itself)"),
                     ("standardised_stripes", "values {lo:.3g}..{hi:.3g} as the data set "
                      "stores them (the model applies no scaling)")):
    config = _config(steps=2, **{"data.name": f"{M}:{name}", "model.conv_widths": (4,),
                                 "model.dense_widths": (8,)})
    task = protocol.build_task(config)
    x = np.asarray(task.data.x_train)
    model = export.exported_model(task)
    contract = export.input_contract(task, model)
    want = want.format(lo=float(x.min()), hi=float(x.max()))  # About -0.975..1.4.
    assert contract["input"] == f"float32 [batch, 6, 6, 1]: {want}"


def test_tfds_data_set_offline_with_mock_data(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(num_examples=70, data_dir=str(tmp_path / "none")):
    config = _config(steps=5, **{"data.name": "tfds:mnist", "eval_batch_size": 32,
                                 "model.conv_widths": (4,), "model.dense_widths": (8,)})
    d = data_lib.load_classification(config.data)
    assert d.image_shape == (28, 28, 1) and d.num_classes == 10
    assert len(d.x_train) == len(d.x_test) == 70 and d.x_train.dtype == np.uint8
    assert d.pixel_scale == pytest.approx(1 / 255)
    result = loop.train_and_evaluate(config, str(tmp_path / "run"))
    assert result["step"] == 5 and 0.0 <= result["accuracy"] <= 1.0
  with pytest.raises(ValueError, match="config.data.name='tfds:no_such_set_xyz'"):
    data_lib.load_classification(_config(**{"data.name": "tfds:no_such_set_xyz"}).data)
  # A typo is named as one (no advice to build a data set that does not exist).
  with pytest.raises(plugins.PluginError) as info:
    data_lib.load_classification(_config(**{"data.name": "tfds:mnsit"}).data)
  assert str(info.value) == ("config.data.name='tfds:mnsit': TensorFlow Datasets has no "
                             "data set 'mnsit'; did you mean 'mnist', ") + str(
                                 info.value).split("did you mean 'mnist', ", 1)[1]
  assert "tfds build" not in str(info.value) and ".." not in str(info.value)


def test_user_task_runs_in_the_one_loop(tmp_path):
  config = _config(steps=200, **{"task": f"{M}:LinearRegressionTask", "batch_size": 32,
                                 "optim.lr": 0.05})
  config_lib.validate(config)
  result = loop.train_and_evaluate(config, str(tmp_path))
  assert result["loss"] < 1e-3, result  # Noise variance 1e-4: w found.
  assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-200")


def test_user_task_errors(tmp_path):
  with pytest.raises(ValueError, match=r"Incomplete lacks \['trainable_variables'.*"
                     r"'train_loss \(or train_gradients\)'\]"):
    loop.train_and_evaluate(_config(**{"task": f"{M}:Incomplete"}), str(tmp_path / "a"))
  with pytest.raises(config_lib.ConfigError, match="or a plug-in 'package.module:attribute'"):
    config_lib.validate(_config(**{"task": "regression"}))
  with pytest.raises(plugins.PluginError, match=r"config.task='plugin_user_module:"
                     r"TakesNothing': TakesNothing\(\) cannot be called as Task\(config\)"):
    loop.train_and_evaluate(_config(**{"task": f"{M}:TakesNothing"}), str(tmp_path / "b"))
  assert not (tmp_path / "b").exists()
  with pytest.raises(plugins.PluginError, match="write a plug-in as 'package.module:attr"):
    plugins.load_object("justamodule:", "config.task")
