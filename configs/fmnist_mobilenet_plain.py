"""Baseline for fmnist_mobilenet_chunked.py: keras.applications.MobileNetV2 (alpha 0.35,
weights=None) at 32x32 trained directly on Fashion-MNIST.

    python -m hypernet.train --config=configs/fmnist_mobilenet_plain.py \
      --workdir=/tmp/fmnist_mnv2_plain --config.data.data_dir=../shared/data/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.data.name = "fashion_mnist"
  c.data.data_dir = ""         # IDX folder; pass --config.data.data_dir=../shared/data/fashion-mnist
  c.num_steps = 2000
  c.batch_size = 64
  c.log_every = 100
  c.eval_every = 1000
  c.checkpoint_every = 1000
  c.model.name = "mobilenet_v2"  # keras.applications.MobileNetV2(weights=None), nested
  c.model.alpha = 0.35
  c.model.image_size = 32
  c.model.bn_momentum = 0.9    # the application's 0.999 leaves inference at chance here
  c.optim.lr = 2e-3
  c.hypernet.kind = "none"
  return c
