"""Baseline for split_fmnist_hnet.py in the same loop and setting: method "finetune"
(see hypernet/tasks/continual_learning.py).

    python -m hypernet.train --config=configs/split_fmnist_finetune.py \
        --workdir=/tmp/hypernet/split_finetune --config.data.data_dir=PATH/TO/fashion-mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "split_fmnist_hnet")
  c.continual.method = "finetune"
  c.hypernet.kind = "none"
  return c
