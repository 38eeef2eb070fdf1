"""Full MLP hypernetwork (one head per tensor) generating every weight of the
fmnist_plain.py CNN.

    python -m hypernet.train --config=configs/fmnist_mlp.py --workdir=/tmp/fmnist_mlp \
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
  c.hypernet.kind = "mlp"
  c.hypernet.targets = "conv*/*,dense*/*,head/*"
  c.hypernet.embedding_dim = 8
  c.hypernet.hidden = (16,)
  return c
