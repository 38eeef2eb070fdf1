"""Support-conditioned hypernetwork, Omniglot 20-way 1-shot within alphabets; scored on
the 20 official one-shot runs of Lake et al. 2015 (all_runs.zip).

As configs/omniglot_support_hypernet.py (the head generated from the support set's
class prototypes, no inner gradient step), meta-trained 20-way on episodes whose 20
characters come from one alphabet (and rotation), as the official runs' are
(``meta.within_alphabet``), with the same distortions of every meta-training drawing,
5,000 meta-steps. The runs' characters come from the evaluation alphabets,
which meta-training never sees: it uses the two background subsets only
(images_background_small1/2.zip, 8 alphabets; Lake et al.'s 5-alphabet background
subsets). 20 characters are held out for 600 (across-alphabet) 20-way meta-test
episodes; ``one_shot_error`` is the error rate over the runs' 400 queries.

    python -m hypernet.train --config=configs/omniglot_20way_support_hypernet.py \
        --workdir=/tmp/hypernet/omniglot_20way_support_hypernet \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet.training import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_support_hypernet")
  c.data.num_test_characters = 20
  c.meta.num_ways = 20
  c.meta.within_alphabet = True
  c.meta.eval_queries = 1      # the runs have one query per class
  c.meta.one_shot_runs = "all_runs.zip"
  c.meta.train_ways = 0        # trained 20-way, as tested
  c.batch_size = 4             # 20-way tasks per meta-batch (80 classes per step)
  c.eval_batch_size = 20
  c.num_steps = 5000           # the distortions keep the held-out accuracy rising longer
  return c
