"""experiments/compression_frontier.py: every kind's point trains on Fashion-MNIST, the
table and plot are written from the runs' final_metrics.json, and the listed commands
reproduce the runs' configs exactly."""
import json
import os

import numpy as np
from PIL import Image
import pytest

from experiments import compression_frontier as cf
from tests.test_experiments import assert_commands_give_the_runs_configs
from hypernet.core import functional
from hypernet.tasks import targets
from hypernet.hypernetworks import source as sources


def test_points_have_the_stated_compression():
  """The sizes in POINTS' comments are those the hypernetworks have (0.5x to >= 10x for
  chunked and static; MLP below 1x by construction)."""
  target = targets.make_cnn((28, 28, 1), 10, conv_widths=(16, 32), dense_widths=(64,))
  ratios = {}
  for kind, name, config_name, overrides, _ in cf.POINTS:
    if kind == "direct":
      continue
    config = cf.load_config(config_name)
    config.update_from_flattened_dict(dict(overrides))
    spec = functional.weight_spec(target, config.hypernet.targets)
    hnet = sources.build_hypernetwork(config.hypernet, spec)
    ratios.setdefault(kind, []).append(hnet.compression_ratio())
  assert len(ratios["chunked"]) >= 5 and len(ratios["static"]) >= 5 and len(ratios["mlp"]) >= 5
  for kind in ("chunked", "static", cf.LINEAR_KIND):
    assert min(ratios[kind]) <= 0.55 and max(ratios[kind]) >= 10, (kind, ratios[kind])
  assert max(ratios["mlp"]) == pytest.approx(105866 / (1 + 2 * 105866))
  assert ratios[cf.EMB_KIND] == ratios["chunked"]  # the multiplier adds no parameter
  assert ratios[cf.LINEAR_PRE_KIND] == ratios[cf.LINEAR_KIND]  # nor does the K-FAC head
  # Each linear point sits at (or above) the compression of the chunked point it replaces.
  assert all(lin >= chk * 0.99 for lin, chk in zip(ratios[cf.LINEAR_KIND], ratios["chunked"]))


@pytest.mark.slow
def test_smoke_frontier_writes_table_and_plot(tmp_path, data_dir, monkeypatch):
  rows = cf.run_frontier(str(tmp_path), str(data_dir / "fashion-mnist"), "smoke", steps=20,
                         seeds=[0], key_seeds=[0])
  paths = cf.write_outputs(rows, str(tmp_path))
  assert [r["kind"] for r in rows] == ["direct", "chunked", "static", "mlp"]
  table = open(paths["md"]).read()
  direct = rows[0]
  for r in rows:
    with open(os.path.join(r["workdirs"][0], "final_metrics.json")) as f:
      final = json.load(f)
    assert final["step"] == 20 and r["accuracy"] == final["accuracy"]
    assert 0.2 < final["accuracy"] <= 1.0  # 20 steps of Fashion-MNIST: above chance (0.1)
    if r["kind"] != "direct":
      assert r["compression"] == final["params/compression_ratio"]
      assert (f"| {r['kind']} | {r['name']} | {final['params/source']:,} | "
              f"{final['params/generated']:,} | {final['params/compression_ratio']:.2f}x | "
              f"{100 * final['accuracy']:.2f} | "
              f"{100 * (final['accuracy'] - direct['accuracy']):+.2f} |") in table
  assert json.load(open(paths["json"]))[1]["source"] == rows[1]["source"] == 9975
  image = np.asarray(Image.open(paths["png"]).convert("L"), np.float32)
  assert image.shape[0] >= 400 and image.std() > 10  # Drawn on, not blank.
  assert_commands_give_the_runs_configs(rows, monkeypatch)
