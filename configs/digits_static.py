"""Static hypernetwork of Ha, Dai & Le 2016 (Sec. 3.1) generating the digits CNN's conv
kernels from 16x16 basic tiles: conv1 [3, 3, 1, 32] (2 tiles, cropped), conv2
[3, 3, 32, 64] (2 x 4 tiles); dense layers trained directly.

    python -m hypernet.train --config=configs/digits_static.py --workdir=/tmp/digits_static
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
  c.hypernet.kind = "static"
  c.hypernet.targets = "conv*/kernel"
  c.hypernet.z_dim = 4
  c.hypernet.static_hidden_dim = 0
  c.hypernet.slice_channels = (16, 16)
  c.optim.lr = 1e-3
  return c
