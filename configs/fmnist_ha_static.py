"""The MNIST setting of Ha, Dai & Le 2016 (Sec. 4.1), on Fashion-MNIST: a static
hypernetwork with N_z = d = 4 generates the second conv kernel 7x7x16x16 of a two-layer
CNN with 4,244 parameters (against 12,544 for the kernel); the rest is trained directly.

    python -m hypernet.train --config=configs/fmnist_ha_static.py --workdir=/tmp/fmnist_ha \
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
  c.hypernet.kind = "static"
  c.hypernet.targets = "conv2/kernel"
  c.hypernet.z_dim = 4
  c.hypernet.static_hidden_dim = 4
  c.hypernet.slice_channels = (16, 16)
  return c
