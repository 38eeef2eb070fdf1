"""hypernet.evaluate restores and evaluates a workdir; the exported .keras target network
predicts exactly as the hypernetwork-driven target does, without hypernet installed."""
import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from hypernet import config_lib


from hypernet.training import export, summaries, loop

from hypernet.tasks import classification
from hypernet import evaluate
from hypernet.core import functional
from hypernet.data.digits import load_digits

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "configs"))
import digits_hyper  # noqa: E402  pylint: disable=g-import-not-at-top
import digits_plain  # noqa: E402  pylint: disable=g-import-not-at-top


def _config(module=digits_hyper):
  c = module.get_config()
  c.num_steps = 150
  c.log_every = 50
  c.eval_every = 50
  c.checkpoint_every = 50
  c.checkpoint_keep = 5
  c.summaries.every = 0
  c.optim.lr = 3e-3
  return c


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("evaluate")
  result = loop.train_and_evaluate(_config(), str(workdir))
  return workdir, result


def _predict_without_hypernet(model_path, x, y):
  """Accuracy and logits of a .keras file, in a process where `import hypernet` fails."""
  data = os.path.join(os.path.dirname(model_path), "test_set.npz")
  np.savez(data, x=x, y=y)
  code = (
      "import sys; sys.modules['hypernet'] = None\n"  # Any hypernet import would fail.
      "import json, numpy as np, keras\n"
      f"m = keras.models.load_model({str(model_path)!r})\n"
      f"z = np.load({data!r})\n"
      "logits = m.predict(z['x'], batch_size=97, verbose=0)\n"
      f"np.save({data[:-4] + '_logits.npy'!r}, logits)\n"
      "print(json.dumps({'accuracy': float((logits.argmax(-1) == z['y']).mean())}))\n")
  out = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(model_path),
                       capture_output=True, text=True, timeout=240,
                       env=dict(os.environ, PYTHONPATH=""))
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])["accuracy"], \
      np.load(data[:-4] + "_logits.npy")


def test_evaluate_command_and_exported_keras_model_agree_on_the_test_set(run, tmp_path):
  workdir, result = run
  model_path = tmp_path / "digits_target.keras"
  out = subprocess.run(
      [sys.executable, "-m", "hypernet.evaluate", f"--workdir={workdir}",
       f"--export={model_path}"], cwd=REPO, capture_output=True, text=True, timeout=240)
  assert out.returncode == 0, out.stderr[-3000:]
  with open(workdir / "eval_step150.json") as f:
    printed = json.load(f)
  assert printed["step"] == 150 and printed["checkpoint"].endswith("ckpt-150")
  assert printed["accuracy"] == pytest.approx(result["accuracy"], abs=1e-12)
  assert printed["loss"] == pytest.approx(result["loss"], rel=1e-6)
  assert 0.2 < printed["accuracy"] < 1.0  # Well above chance (0.1), not perfect.
  # A table, and how to use the exported file: its input contract.
  assert out.stdout.splitlines() == [
      f"Evaluated step 150 ({workdir}/checkpoints/ckpt-150):",
      f"  accuracy   {100 * printed['accuracy']:.2f}%",
      f"  loss       {printed['loss']:.4g}",
      f"  metrics:   {workdir}/eval_step150.json",
      f"Exported the target network to {model_path}",
      "  input:     float32 [batch, 8, 8, 1]: values 0..16 as the data set stores "
      "them (the model scales them by 1/16 itself)",
      "  output:    logits [batch, 10] (apply a softmax for probabilities, or export with "
      "--export_softmax)",
      "  load:      keras.models.load_model(path): Keras alone, no hypernet import"]
  assert printed["export_contract"]["output"].startswith("logits [batch, 10]")

  # The exported model takes the stored pixels (digits: 0..16) and scales them itself.
  data = load_digits()
  raw = data.x_test.astype(np.float32)
  assert raw.max() == 16.0
  accuracy, logits = _predict_without_hypernet(model_path, raw, data.y_test)
  assert accuracy == pytest.approx(printed["accuracy"], abs=1e-12)
  # The same logits as the target running on the hypernetwork's output, on the pipeline's
  # input (pixels / 16).
  trainer = loop.Trainer(_config(), str(workdir))
  trainer.restore()
  x = raw * np.float32(data.pixel_scale)
  expected = functional.functional_call(trainer.task.target, trainer.task.source.weights(),
                                        tf.constant(x))
  np.testing.assert_allclose(logits, expected.numpy(), rtol=1e-5, atol=1e-5)
  # --export_softmax: class probabilities.
  probs_path = tmp_path / "digits_probs.keras"
  contract = evaluate.evaluate(str(workdir), export_path=str(probs_path), output="",
                               softmax=True)["export_contract"]
  assert contract["output"] == "class probabilities [batch, 10] (a softmax)"
  probs = keras.models.load_model(probs_path).predict(raw, verbose=0)
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(probs, tf.nn.softmax(expected).numpy(), rtol=1e-4, atol=1e-6)


def test_named_checkpoint_reproduces_the_eval_logged_at_that_step(run):
  workdir, _ = run
  logged = dict(summaries.read_scalars(str(workdir / "eval"))["accuracy"])
  assert sorted(logged) == [0, 50, 100, 150]  # Eval at step 0 too.
  for checkpoint in (50, "100"):
    result = evaluate.evaluate(str(workdir), checkpoint=checkpoint, output="")
    assert result["step"] == int(checkpoint)
    assert result["accuracy"] == pytest.approx(logged[int(checkpoint)], abs=1e-6)
  assert not (workdir / "eval_step50.json").exists()  # output="" writes nothing


def test_export_copies_batchnorm_statistics_and_direct_weights(tmp_path):
  """A plain target with BatchNorm: exported logits == the task's inference logits."""
  config = _config(digits_plain)
  config.model.batch_norm = True
  task = classification.ClassificationTask(config)
  rng = np.random.default_rng(0)
  for path, v in functional.variable_paths(task.target, trainable=False).items():
    if "moving" in path:  # Non-trivial statistics, as after training.
      v.assign(rng.uniform(0.5, 1.5, v.shape).astype(np.float32))
  model = export.export_target(task, str(tmp_path / "plain.keras"))
  loaded = keras.models.load_model(tmp_path / "plain.keras")
  raw = tf.constant(task.data.x_test[:50].astype(np.float32))  # Stored pixels, 0..16.
  expected = functional.functional_call(task.target, task.source.weights(), raw / 16.0)
  np.testing.assert_allclose(loaded(raw).numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(model(raw).numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_errors_name_the_problem(run, tmp_path):
  workdir, _ = run
  with pytest.raises(FileNotFoundError, match=r"ckpt-7 does not exist; present: .*ckpt-150"):
    evaluate.evaluate(str(workdir), checkpoint=7, output="")
  with pytest.raises(FileNotFoundError, match=r"holds no config\.json"):
    evaluate.evaluate(str(tmp_path))
  # A run whose config.json names a data folder that is not there from here (a relative
  # path saved as given): the error says to pass --data_dir.
  moved = tmp_path / "moved"
  shutil.copytree(workdir, moved)
  config = json.loads((moved / "config.json").read_text())
  config["data"].update(name="fashion_mnist", data_dir="relative/fashion-mnist")
  (moved / "config.json").write_text(json.dumps(config))
  with pytest.raises(FileNotFoundError, match=r"pass the data folder as --data_dir=PATH "
                                              r"\(the run's config\.data\.data_dir is "
                                              r"'relative/fashion-mnist'\)"):
    evaluate.evaluate(str(moved), output="")
  task = classification.ClassificationTask(_config())
  with pytest.raises(ValueError, match=r"must end in '\.keras'"):
    export.export_target(task, str(tmp_path / "model.h5"))


@pytest.mark.parametrize("condition", [9, 5, -1])
def test_export_condition_out_of_range_fails_before_any_work(tmp_path, condition):
  """A continual hnet run (5 tasks, one condition each): checked from config.json alone,
  before the checkpoint is looked for (this workdir has none)."""
  config = config_lib.load_config_file(os.path.join(REPO, "configs", "split_fmnist_hnet.py"))
  (tmp_path / "config.json").write_text(config.to_json_best_effort())
  with pytest.raises(export.ExportConditionError,
                     match=rf"--condition={condition} is out of range: the run has 5 "
                           r"conditions \(config\.continual\.num_tasks=5\); pick one of 0\.\.4"):
    evaluate.evaluate(str(tmp_path), export_path=str(tmp_path / "x.keras"),
                      condition=condition, output="")
  export.check_condition(config, 4)
  export.check_condition(_config(), 9)  # One weight set: the condition is ignored.


@pytest.mark.parametrize("name", ["omniglot_support_hypernet",
                                  "omniglot_support_target_hypernet"])
def test_support_hypernetwork_run_refuses_export_before_any_work(tmp_path, name):
  """Its head is generated per task (the target's own head is never trained): no file
  of a target network, refused from config.json alone (this workdir has no checkpoint)."""
  config = config_lib.load_config_file(os.path.join(REPO, "configs", f"{name}.py"))
  (tmp_path / "config.json").write_text(config.to_json_best_effort())
  with pytest.raises(export.NotExportableError,
                     match=r"^--export: config\.meta\.learner='support_hypernet' generates"):
    evaluate.evaluate(str(tmp_path), export_path=str(tmp_path / "x.keras"), output="")
  with pytest.raises(FileNotFoundError):  # Without --export: on to the checkpoint.
    evaluate.evaluate(str(tmp_path), output="")
  out = subprocess.run([sys.executable, "-m", "hypernet.evaluate", f"--workdir={tmp_path}",
                        f"--export={tmp_path / 'x.keras'}"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
  assert out.returncode == 1 and out.stderr.strip().splitlines() == [
      "evaluate.py: error: --export: config.meta.learner='support_hypernet' generates the "
      "head from each task's support set, so the run has no single target network to "
      "export; score it without --export, or train with hypernet.keras.MetaModel and save "
      "that model."], out.stderr


def test_few_shot_config_evaluates_like_the_train_loop_and_exports_its_initialisation(tmp_path):
  """5-way 1-shot MAML on digits (a few_shot config): hypernet.evaluate reproduces the
  loop's final meta-test metrics; the export is the learned initialisation."""
  c = config_lib.base_config()
  c.task, c.data.name, c.jit_compile = "few_shot", "digits", "false"
  c.model.name, c.model.conv_widths = "conv4", (8, 8)
  c.batch_size, c.eval_batch_size = 4, 6
  c.meta.num_queries, c.meta.eval_queries, c.meta.eval_episodes = 2, 2, 12
  c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 6, 3, 3, 3
  c.summaries.every = 3
  result = loop.train_and_evaluate(c, str(tmp_path))
  assert {"accuracy", "accuracy_before", "accuracy_ci95", "loss"} <= set(result)
  evaluated = evaluate.evaluate(str(tmp_path), export_path=str(tmp_path / "init.keras"))
  for k in ("accuracy", "accuracy_before", "accuracy_ci95", "loss", "loss_before"):
    assert evaluated[k] == pytest.approx(result[k], rel=1e-6, abs=1e-9), k
  at_3 = evaluate.evaluate(str(tmp_path), checkpoint=3, output="")
  logged = dict(summaries.read_scalars(str(tmp_path / "eval"))["accuracy"])
  assert at_3["accuracy"] == pytest.approx(logged[3], abs=1e-6)
  trainer = loop.Trainer(c, str(tmp_path))
  trainer.restore()
  x = tf.random.stateless_uniform((7, 8, 8, 1), seed=[1, 2])
  expected = functional.functional_call(trainer.task.target, trainer.task.source.weights(), x)
  loaded = keras.models.load_model(tmp_path / "init.keras")
  np.testing.assert_allclose(loaded(x).numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


# -- evaluating a run in other N-way K-shot settings (--set) --------------------------
def _support_hypernet_config(data_dir):
  """The support-conditioned hypernetwork on the two small background subsets, trained
  10-way (its head serves 1..10-way), a conv4 of width 8: seconds a step."""
  c = config_lib.load_config_file(os.path.join(REPO, "configs",
                                               "omniglot_support_hypernet.py"))
  c.data.data_dir = str(data_dir / "omniglot")
  c.model.conv_widths = (8, 8, 8, 8)
  c.meta.train_ways, c.meta.num_queries, c.meta.eval_queries = 10, 2, 3
  c.meta.eval_episodes, c.batch_size, c.eval_batch_size = 6, 2, 4
  c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 4, 2, 0, 4
  c.summaries.every, c.summaries.hparams, c.jit_compile = 0, False, "false"
  return c


@pytest.mark.slow  # ~30 s on 2 busy cores: a 4-step run, its evaluation and a Trainer's.
def test_evaluate_set_scores_other_ways_and_shots_as_a_run_built_for_them(data_dir, tmp_path):
  """A run trained 10-way, evaluated 8-way 2-shot on 5 episodes: the metrics of a Trainer
  built from the config with those fields changed, restored from the same checkpoint;
  the JSON is named after the setting and records it."""
  c = _support_hypernet_config(data_dir)
  final = loop.train_and_evaluate(c, str(tmp_path))
  got = evaluate.evaluate(str(tmp_path), overrides=["meta.num_ways=8", "meta.num_shots=2",
                                                     "meta.eval_episodes=5"])
  saved = json.loads((tmp_path / "eval_step4_num_ways8_num_shots2_eval_episodes5.json")
                     .read_text())
  assert saved["overrides"] == {"meta.num_ways": 8, "meta.num_shots": 2,
                                "meta.eval_episodes": 5}
  assert saved["accuracy"] == got["accuracy"] and saved["step"] == 4
  expected_config = config_lib.config_from_dict(json.loads(
      (tmp_path / "config.json").read_text()))
  expected_config.meta.update(num_ways=8, num_shots=2, eval_episodes=5)
  trainer = loop.Trainer(expected_config, str(tmp_path))
  trainer.restore()
  expected = trainer.evaluate()
  for k in ("accuracy", "accuracy_ci95", "loss"):
    assert got[k] == pytest.approx(expected[k], rel=1e-6, abs=1e-9), k
  # The run's own setting (5-way 1-shot, 6 episodes) scored otherwise; names differ.
  assert final["accuracy"] != got["accuracy"]
  assert not (tmp_path / "eval_step4.json").exists()
  line = evaluate.report(got).splitlines()[1]
  assert line.split() == ["setting:", "meta.num_ways=8,", "meta.num_shots=2,",
                          "meta.eval_episodes=5"]


def test_eval_config_keeps_a_support_hypernetwork_head_for_fewer_ways():
  """Trained 5-way (train_ways=0: a 5-output head), asked 3-way: train_ways is set to 5
  so the head keeps its shape (the classes an episode lacks are masked); TF-free."""
  c = config_lib.load_config_file(os.path.join(REPO, "configs",
                                               "omniglot_support_hypernet.py"))
  c.meta.train_ways = 0
  new, applied = evaluate.eval_config(c, ["meta.num_ways=3", "eval_batch_size=7"])
  assert applied == {"meta.num_ways": 3, "eval_batch_size": 7}
  assert (new.meta.num_ways, new.meta.train_ways, config_lib.head_ways(new)) == (3, 5, 5)
  assert (c.meta.num_ways, c.meta.train_ways) == (5, 0)  # The run's config is unchanged.
  assert evaluate.setting_tag(applied) == "num_ways3"  # The batch size: no other result.
  assert evaluate.setting_tag({"meta.eval_steps_sweep": (1, 5), "meta.num_shots": 5}) == \
      "num_shots5_eval_steps_sweep1-5"
  assert evaluate.eval_config(c, []) == (c, {})
  # Prototypical Networks trained 40-way serve the standard split's four settings.
  protonet = config_lib.load_config_file(os.path.join(REPO, "configs",
                                                      "omniglot_standard_protonet.py"))
  for ways, shots in ((5, 1), (5, 5), (20, 1), (20, 5)):
    new, _ = evaluate.eval_config(protonet, [f"meta.num_ways={ways}",
                                             f"meta.num_shots={shots}"])
    assert config_lib.head_ways(new) == 40 and new.meta.num_shots == shots


@pytest.mark.parametrize("config_name,overrides,message", [
    ("omniglot_maml", ["meta.num_ways=20"],
     "--set meta.num_ways=20: learner 'maml' adapts the run's 5-way head "
     "(config.meta.num_ways=5 when trained), so it evaluates 5-way episodes only; learners "
     "'support_hypernet', 'protonet' and 'support_adapter' (a head written per task) "
     "with "
     "config.meta.train_ways >= N serve any N-way."),
    ("omniglot_standard_support_hypernet", ["meta.num_ways=61"],
     "--set meta.num_ways=61: the run's per-task head has 60 outputs (config.meta."
     "train_ways=60, num_ways=5 when trained), so it serves up to 60-way episodes; "
     "meta-train with --config.meta.train_ways=61 or more."),
    ("omniglot_maml", ["meta.num_way=5"],
     "--set meta.num_way=5: config.meta has no field 'num_way'. Did you mean "
     "config.meta.num_ways?"),
    ("omniglot_maml", ["meta.num_shots=five"],
     "--set meta.num_shots=five: config.meta.num_shots takes an int (now 1); 'five' is not "
     "one."),
    ("omniglot_maml", ["meta.num_shots=0"],
     "--set meta.num_shots=0: config.meta.num_shots must be an integer >= 1, got 0."),
    ("omniglot_standard_support_hypernet", ["meta.num_shots=6"],
     "--set meta.num_shots=6: config.meta.num_shots + max(num_queries, eval_queries) = 6 "
     "+ 15 = 21 drawings per class, but Omniglot has 20 per character; lower num_shots or "
     "the query counts."),
    ("omniglot_maml", ["data.split_seed=3"],
     "--set data.split_seed=3: config.data.split_seed is not an evaluation field (it "
     "changes the trained model, its training or the held-out characters); --set takes "
     + ", ".join(evaluate.EVAL_FIELDS) + "."),
])
def test_evaluate_set_refuses_in_one_line_before_tensorflow(tmp_path, config_name, overrides,
                                                            message):
  """From config.json alone (this workdir has no checkpoint), in a process that cannot
  import TensorFlow; a MAML head asked for other ways is named, not a shape traceback."""
  config = config_lib.load_config_file(os.path.join(REPO, "configs", f"{config_name}.py"))
  (tmp_path / "config.json").write_text(config.to_json_best_effort())
  with pytest.raises(config_lib.ConfigError) as e:
    evaluate.eval_config(evaluate.load_config(str(tmp_path)), overrides)
  assert str(e.value) == message
  code = ("import runpy, sys\n"
          "sys.modules['tensorflow'] = sys.modules['keras'] = None\n"
          f"sys.argv = ['hypernet.evaluate', '--workdir={tmp_path}'] + "
          f"{['--set=' + o for o in overrides]!r}\n"
          "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n")
  out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
  assert out.returncode == 1 and out.stderr == f"evaluate.py: error: {message}\n", out.stderr
  assert sorted(os.listdir(tmp_path)) == ["config.json"]
