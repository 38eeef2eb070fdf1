"""Meta-SGD (Li et al. 2017): learned per-parameter inner learning rates; Omniglot
5-way 1-shot, conv4.

As configs/omniglot_maml.py with a trainable inner learning rate per adapted weight,
initialised to 0.4 (TensorBoard: inner_lr/<path>). Second order, XLA off.

    python -m hypernet.train --config=configs/omniglot_metasgd.py \
        --workdir=/tmp/hypernet/omniglot_metasgd --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_maml")
  c.meta.learner = "metasgd"   # second order: XLA stays off (see omniglot_maml.py)
  return c
