"""Static hypernetwork of Ha, Dai & Le 2016 (Sec. 3.1) generating the digits CNN's conv
kernels from 16x16 basic tiles: conv1 [3, 3, 1, 32] (2 tiles, cropped), conv2
[3, 3, 32, 64] (2 x 4 tiles); dense layers trained directly.

    python -m hypernet.train --config=configs/digits_static.py --workdir=/tmp/digits_static
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "digits_hyper_relu")
  c.hypernet.kind = "static"
  c.hypernet.targets = "conv*/kernel"
  c.hypernet.z_dim = 4
  c.hypernet.hidden_dim = 0
  c.hypernet.slice_in, c.hypernet.slice_out = 16, 16
  c.optim.lr = 1e-3            # its own setting (digits_hyper's chunked network uses 5e-3)
  return c
