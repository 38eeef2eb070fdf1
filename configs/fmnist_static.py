"""Static hypernetwork (Ha et al. 2016) generating both conv kernels of the
fmnist_plain.py CNN from 16x16 tiles (conv1 [3,3,1,16]: 1 tile cropped; conv2
[3,3,16,32]: 1 x 2 tiles); biases and dense layers trained directly.

    python -m hypernet.train --config=configs/fmnist_static.py --workdir=/tmp/fmnist_static \
      --config.data.data_dir=../shared/data/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "fmnist_plain")
  c.hypernet.kind = "static"
  c.hypernet.targets = "conv*/kernel"
  c.hypernet.z_dim = 4
  c.hypernet.slice_in, c.hypernet.slice_out = 16, 16
  return c
