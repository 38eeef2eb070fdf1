"""Baseline for split_fmnist_hnet.py in the same loop and setting: method "ewc"
(see hypernet/tasks/continual_learning.py).

    python -m hypernet.train --config=configs/split_fmnist_ewc.py \
        --workdir=/tmp/hypernet/split_ewc --config.data.data_dir=PATH/TO/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "split_fmnist_hnet")
  c.continual.method = "ewc"
  c.hypernet.kind = "none"
  # Split Fashion-MNIST, seed 0, forgetting (CL1) for lambda 100 / 1e3 / 1e4 / 1e5:
  # 23.3 / 17.9 / 10.2 / 7.9 points (experiments/RESULTS_continual.md).
  c.continual.ewc_lambda = 1e5
  return c
