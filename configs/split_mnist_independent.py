"""Baseline for split_mnist_hnet.py in the same loop and setting (target 784-400-400,
2,000 steps per task, batch 128, Adam 1e-3, constant): method "independent"
(see hypernet/tasks/continual_learning.py).

    python -m hypernet.train --config=configs/split_mnist_independent.py \
        --workdir=/tmp/hypernet/split_mnist_independent --config.data.data_dir=../shared/data/mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "split_mnist_hnet")
  c.continual.method = "independent"
  c.hypernet.kind = "none"
  return c
