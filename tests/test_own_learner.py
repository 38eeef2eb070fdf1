"""A learner written outside the package (examples/own_learner/my_learner.py) trains
through the command line (config.meta.learner = "my_learner:PerLayerMAML") and through
hn.keras.MetaModel(...).fit, and adapts: the query loss after adaptation is well below
the loss before it."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "own_learner"


@pytest.fixture
def on_path(monkeypatch):
  monkeypatch.syspath_prepend(str(EXAMPLE))
  yield
  for name in ("my_learner", "train"):
    sys.modules.pop(name, None)


def test_own_learner_trains_through_the_cli(tmp_path):
  workdir = tmp_path / "run"
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLE), str(ROOT)]))
  subprocess.run(
      [sys.executable, "-m", "hypernet.train", "--config=configs/sinusoid_maml.py",
       "--config.meta.learner=my_learner:PerLayerMAML", f"--workdir={workdir}",
       "--config.num_steps=300", "--config.batch_size=8", "--config.log_every=300",
       "--config.eval_every=300", "--config.checkpoint_every=300",
       "--config.meta.eval_episodes=100", "--config.meta.inner_lr=0.05",
       "--config.meta.inner_steps=2", "--config.meta.eval_inner_steps=5",
       "--config.optim.lr=3e-3"], cwd=ROOT, env=env, check=True, capture_output=True)
  metrics = json.loads((workdir / "final_metrics.json").read_text())
  assert metrics["loss"] < 0.8 * metrics["loss_before"]
  # The three learned rates are trained with the target (1,761 weights).
  assert metrics["params/trainable"] == 1761 + 3
  config = json.loads((workdir / "config.json").read_text())
  assert config["meta"]["learner"] == "my_learner:PerLayerMAML"


def test_own_learner_trains_through_keras_fit_and_reloads(on_path, tmp_path):
  import train  # examples/own_learner/train.py
  import keras
  import numpy as np
  import hypernet as hn
  from hypernet import meta
  metrics = train.main(steps=300)
  assert metrics["loss"] < 0.7 * metrics["loss_before"]
  # Built from the registry by class, name or config group alike.
  from my_learner import PerLayerMAML
  target = keras.Sequential([keras.Input((1,)), keras.layers.Dense(4, name="d"),
                             keras.layers.Dense(1, name="head")])
  model = hn.keras.MetaModel(target, PerLayerMAML, loss="mse",
                             learner_args={"inner_lr": 0.02})
  assert model.get_config()["learner"] == "my_learner:PerLayerMAML"
  path = str(tmp_path / "m.keras")
  model.learner.log_lrs["head"].assign(np.log(0.3))
  model.save(path)
  loaded = keras.saving.load_model(path)
  assert isinstance(loaded.learner, PerLayerMAML)
  np.testing.assert_allclose(loaded.learner.log_lrs["head"].numpy(), np.log(0.3), rtol=1e-6)
  built = meta.learner.build_learner("my_learner:PerLayerMAML",
                                     {"inner_lr": 0.1, "inner_steps": 3, "adapt": ""},
                                     target, "mse")
  assert built.inner_steps == 3
  np.testing.assert_allclose(float(built.log_lrs["d"].numpy()), np.log(0.1), rtol=1e-6)
