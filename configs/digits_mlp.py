"""Full MLP hypernetwork (one output head per target tensor) generating every weight of
the digits CNN of digits_plain.py.

    python -m hypernet.train --config=configs/digits_mlp.py --workdir=/tmp/digits_mlp
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.data.name = "digits"
  c.data.augment_shift = 1
  c.num_steps = 3000
  c.batch_size = 64
  c.eval_every = 1000
  c.checkpoint_every = 1000
  c.model.conv_widths = (32, 64)
  c.model.dense_widths = (64,)
  c.model.dropout = 0.3
  c.hypernet.kind = "mlp"
  c.hypernet.targets = "conv*/*,dense*/*,head/*"
  c.hypernet.embedding_dim = 8
  c.hypernet.hidden = (32,)
  c.optim.lr = 1e-3
  return c
