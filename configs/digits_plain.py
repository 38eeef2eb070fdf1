"""Baseline for digits_hyper: the same target CNN trained directly (no hypernetwork).

    python -m hypernet.train --config=configs/digits_plain.py --workdir=/tmp/digits_plain
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.data.name = "digits"
  c.data.augment_shift = 1     # +-1 pixel translations: the set has only 1,437 images
  c.num_steps = 3000
  c.batch_size = 64
  c.model.conv_widths = (32, 64)
  c.model.dense_widths = (64,)
  c.model.dropout = 0.3
  c.hypernet.kind = "none"
  c.optim.lr = 1e-3
  return c
