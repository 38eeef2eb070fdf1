"""Baseline for digits_hyper: the same target CNN trained directly (no hypernetwork).

    python -m hypernet.train --config=configs/digits_plain.py --workdir=/tmp/digits_plain
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "digits_hyper")
  c.hypernet.kind = "none"
  c.optim.lr = 1e-3            # its own setting (digits_hyper's chunked network uses 5e-3)
  return c
