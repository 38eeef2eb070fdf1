"""Baseline for fashion_mnist_hyper: the same target CNN (BatchNorm after each conv)
trained directly.

    python -m hypernet.train --config=configs/fashion_mnist_plain.py \
        --workdir=/tmp/hypernet/fmnist_plain --config.data.data_dir=PATH/TO/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "fashion_mnist_hyper")
  c.model.dropout = 0.3
  c.hypernet.kind = "none"
  c.optim.lr = 1e-3            # direct training's own setting (the hypernetwork uses 3e-3)
  return c
