"""experiments/digits_sweep.py writes the table, the JSON and the PNG plots, and its
listed commands reproduce its runs' configs exactly."""
import json
import os
import shlex
import sys

from absl import flags
from ml_collections import config_flags
import numpy as np
from PIL import Image

from experiments import digits_sweep
from hypernet import config_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_smoke_sweep_writes_table_and_plots(tmp_path, monkeypatch):
  rows = digits_sweep.run_sweep(str(tmp_path), "smoke", steps=40, seeds=[0])
  paths = digits_sweep.write_outputs(rows, str(tmp_path))
  assert [r["name"] for r in rows] == ["plain_8-16", "hyper_c128"]
  assert [r["kind"] for r in rows] == ["plain", "hypernetwork"]

  table = open(paths["table"]).read()
  for r in rows:
    with open(os.path.join(r["workdirs"][0], "final_metrics.json")) as f:
      final = json.load(f)
    assert final["step"] == 40
    assert r["trainable"] == final["params/trainable"] and r["accuracy"] == final["accuracy"]
    assert (f"| {r['name']} | {r['kind']} | {final['params/trainable']:,} | "
            f"{final['params/target']:,} | {final['params/target'] / final['params/trainable']:.2f}"
            f" | {100 * final['accuracy']:.2f} |") in table
    steps = [s for s, _ in r["curves"]["eval_accuracy"]]
    assert steps == list(range(4, 41, 4))
    assert r["curves"]["eval_accuracy"][-1][1] == np.float32(final["accuracy"])
  assert rows[0]["trainable"] == rows[0]["target"]  # plain: every target weight trained
  assert rows[1]["target"] > 5 * rows[1]["trainable"]  # hypernetwork: compresses
  assert json.load(open(paths["json"]))[1]["trainable"] == rows[1]["trainable"]

  for key in ("accuracy_vs_params", "learning_curves"):
    image = np.asarray(Image.open(paths[key]).convert("L"), np.float32)
    assert image.shape[0] >= 400 and image.shape[1] >= 700
    assert image.std() > 10  # Drawn on, not blank.

  # Each listed command, parsed as hypernet.train parses it, gives the run's config.
  for r in rows:
    parts = shlex.split(r["command"])
    assert parts[:3] == ["python", "-m", "hypernet.train"]
    assert parts[4] == f"--workdir={r['workdirs'][0]}"
    argv = ["train", parts[3].replace("configs/", f"{REPO}/configs/")] + parts[5:]
    monkeypatch.setattr(sys, "argv", argv)
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, flag_values=fv, lock_config=True)
    fv(argv)
    with open(os.path.join(r["workdirs"][0], "config.json")) as f:
      saved = config_lib.config_from_dict(json.load(f))
    assert config_lib.flatten(saved) == config_lib.flatten(fv.config), r["command"]

  # A rerun reuses the finished runs.
  mtime = os.path.getmtime(os.path.join(rows[1]["workdirs"][0], "final_metrics.json"))
  again = digits_sweep.run_sweep(str(tmp_path), "smoke", steps=40, seeds=[0])
  assert [r["accuracy"] for r in again] == [r["accuracy"] for r in rows]
  assert os.path.getmtime(os.path.join(rows[1]["workdirs"][0], "final_metrics.json")) == mtime
