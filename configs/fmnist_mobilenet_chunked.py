"""A chunked hypernetwork generating every convolution kernel (regular and depthwise) of a
keras.applications.MobileNetV2 (alpha 0.35, weights=None, 32x32) nested in the target;
BatchNorm gamma/beta and the head are trained directly, moving statistics carried as
state.

    python -m hypernet.train --config=configs/fmnist_mobilenet_chunked.py \
      --workdir=/tmp/fmnist_mnv2_chunked --config.data.data_dir=../shared/data/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "fmnist_mobilenet_plain")
  c.hypernet.kind = "chunked"
  c.hypernet.targets = "re:(?!head/).*kernel"  # every conv kernel, not the head
  c.hypernet.chunk_size = 2048
  c.hypernet.chunk_emb_dim = 32
  c.hypernet.hidden = (64,)
  return c
