"""Baseline for digits_hyper_relu.py: the same target CNN trained directly (no hypernetwork).
With the main job's schedule (`--config.num_steps=10000 --config.model.dropout=0.2`)
it is the baseline of configs/digits_hyper.py.

    python -m hypernet.train --config=configs/digits_plain.py --workdir=/tmp/digits_plain
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "digits_hyper_relu")
  c.hypernet.kind = "none"
  c.optim.lr = 1e-3            # its own setting (digits_hyper's chunked network uses 5e-3)
  return c
