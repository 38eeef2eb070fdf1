"""Static hypernetwork (Ha et al. 2016) at 14.7x compression: both conv kernels of the
fmnist_plain.py CNN (4,752 weights) from 323 parameters (N_z = d = 1); biases and dense
layers trained directly (the compression counts the generated kernels only).

    python -m hypernet.train --config=configs/fmnist_static_15x.py \
      --workdir=/tmp/fmnist_static_15x --config.data.data_dir=../shared/data/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "fmnist_static")
  # 3 N_z + 16 (N_z d + d) + 144 d + 144 = 3 + 32 + 144 + 144 = 323 parameters.
  c.hypernet.z_dim = 1
  c.hypernet.hidden_dim = 1
  return c
