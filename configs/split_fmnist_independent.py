"""Baseline for split_fmnist_hnet.py in the same loop and setting: method "independent"
(see hypernet/tasks/continual_learning.py).

    python -m hypernet.train --config=configs/split_fmnist_independent.py \
        --workdir=/tmp/hypernet/split_independent --config.data.data_dir=PATH/TO/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "split_fmnist_hnet")
  c.continual.method = "independent"
  c.hypernet.kind = "none"
  return c
