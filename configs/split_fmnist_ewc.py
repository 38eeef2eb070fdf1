"""Baseline for split_fmnist_hnet.py in the same loop and setting: method "ewc"
(see hypernet/continual_tasks.py).

    python -m hypernet.train --config=configs/split_fmnist_ewc.py \
        --workdir=/tmp/hypernet/split_ewc --config.data.data_dir=PATH/TO/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "split_fmnist_hnet")
  c.continual.method = "ewc"
  c.hypernet.kind = "none"
  return c
