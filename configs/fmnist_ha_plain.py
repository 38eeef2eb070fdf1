"""Baseline for fmnist_ha_static.py: the MNIST network of Ha et al. 2016 trained
directly (its second conv kernel 7x7x16x16 has 12,544 weights).

    python -m hypernet.train --config=configs/fmnist_ha_plain.py --workdir=/tmp/fmnist_ha_plain \
      --config.data.data_dir=../shared/data/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.data.name = "fashion_mnist"
  c.data.data_dir = ""         # IDX folder; pass --config.data.data_dir=../shared/data/fashion-mnist
  c.num_steps = 3000
  c.batch_size = 64
  c.log_every = 250
  c.eval_every = 1000
  c.checkpoint_every = 1000
  # The MNIST network of Ha et al. 2016 (Sec. 4.1): two 7x7 conv layers of 16 filters.
  c.model.conv_widths = (16, 16)
  c.model.kernel_size = 7
  c.model.dense_widths = ()
  c.optim.lr = 1e-3
  c.hypernet.kind = "none"
  return c
