"""Fashion-MNIST baseline: the target CNN of the fmnist_* hypernetwork configs, trained
directly (conv 16-32, dense 64).

    python -m hypernet.train --config=configs/fmnist_plain.py --workdir=/tmp/fmnist_plain \
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
  c.model.conv_widths = (16, 32)
  c.model.dense_widths = (64,)
  c.optim.lr = 1e-3
  c.hypernet.kind = "none"
  return c
