"""The support-conditioned hypernetwork meta-trained on 5-shot episodes, for 5-shot tests.

``configs/omniglot_standard_support_hypernet.py`` (the standard 1,200 / 423-character
split of Vinyals et al. 2016, ``data.split_seed = 0``; distorted drawings; 10,000
meta-steps of two episodes, the rate's cosine over them) with two fields changed:

* ``meta.num_shots = 5``: every meta-training episode has 5 support drawings per class
  (and 5 queries), as Snell et al. 2017 and MAML++ train a separate model for their
  5-shot columns; the run's own evaluation is then 1,000 episodes of 5-way 5-shot;
* ``meta.train_ways = 40``: 40-way episodes (800 drawings a step against the 1-shot
  config's 720 at 60-way), so a step costs about what that config's does.

Scored like that config with ``experiments/omniglot_standard.py`` in all four settings;
its targets are the two 5-shot ones (MAML++ 99.93 / 99.33 in 5-way / 20-way 5-shot).

    python -m hypernet.train --config=configs/omniglot_standard_support_hypernet_5shot.py \
        --workdir=/tmp/hypernet/omniglot_standard_support_hypernet_5shot \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_standard_support_hypernet")
  c.meta.num_shots = 5      # 5 support + 5 query drawings per class, of Omniglot's 20
  c.meta.train_ways = 40
  return c
