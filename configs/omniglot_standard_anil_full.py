"""ANIL on Omniglot's standard split at MAML's budget (Raghu et al. 2020; a GPU's).

Raghu et al. train ANIL with MAML's Omniglot settings (Finn et al. 2017):
``configs/omniglot_standard_maml_full.py`` (meta-batch 32, 60,000 meta-steps, one inner
step of 0.4, three at meta-test, one query per class; what differs from the paper is said
there) adapting only the head, as ``configs/omniglot_standard_anil.py``. Raghu et al.'s
Omniglot results are 20-way: ``--config.meta.num_ways=20`` (meta-training and meta-test
at that way). Not run here.

    python -m hypernet.train --config=configs/omniglot_standard_anil_full.py \
        --workdir=/tmp/hypernet/omniglot_standard_anil_full \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_standard_maml_full")
  c.meta.learner = "anil"
  return c
