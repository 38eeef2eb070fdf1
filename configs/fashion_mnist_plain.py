"""Baseline for fashion_mnist_hyper: the same target CNN trained directly.

    python -m hypernet.train --config=configs/fashion_mnist_plain.py \
        --workdir=/tmp/hypernet/fmnist_plain --config.data.data_dir=PATH/TO/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.data.name = "fashion_mnist"
  c.data.augment_shift = 0
  c.num_steps = 8000          # 17 epochs at batch 128
  c.batch_size = 128
  c.eval_batch_size = 1000
  c.log_every = 200
  c.eval_every = 2000
  c.checkpoint_every = 1000
  c.model.conv_widths = (32, 64)
  c.model.dense_widths = (64,)
  c.model.dropout = 0.3
  c.hypernet.kind = "none"
  c.optim.lr = 1e-3
  return c
