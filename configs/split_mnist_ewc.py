"""Baseline for split_mnist_hnet.py in the same loop and setting (target 784-400-400,
2,000 steps per task, batch 128, Adam 1e-3, constant): method "ewc"
(see hypernet/tasks/continual_learning.py).

    python -m hypernet.train --config=configs/split_mnist_ewc.py \
        --workdir=/tmp/hypernet/split_mnist_ewc --config.data.data_dir=../shared/data/mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "split_mnist_hnet")
  c.continual.method = "ewc"
  c.hypernet.kind = "none"
  # The strength chosen on split Fashion-MNIST (seed 0, forgetting for lambda 1e2 / 1e3 /
  # 1e4 / 1e5: 23.3 / 17.9 / 10.2 / 7.9 points; configs/split_fmnist_ewc.py), not tuned
  # on MNIST.
  c.continual.ewc_lambda = 1e5
  return c
