"""The MNIST setting of Ha, Dai & Le 2016 (Sec. 4.1), on Fashion-MNIST: a static
hypernetwork with N_z = d = 4 generates the second conv kernel 7x7x16x16 of a two-layer
CNN with 4,244 parameters (against 12,544 for the kernel); the rest is trained directly.

    python -m hypernet.train --config=configs/fmnist_ha_static.py --workdir=/tmp/fmnist_ha \
      --config.data.data_dir=../shared/data/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "fmnist_ha_plain")
  c.hypernet.kind = "static"
  c.hypernet.targets = "conv2/kernel"
  c.hypernet.static_hidden_dim = 4
  c.hypernet.z_dim = 4              # N_z = d = 4 (Ha et al. 2016, Sec. 4.1)
  c.hypernet.slice_channels = (16, 16)
  # The hypernetwork needs a larger step than direct training (at 1e-3: 86.85%, 1.2 points
  # below fmnist_ha_plain.py; experiments/RESULTS_hypernets.md).
  c.optim.lr = 3e-3
  return c
