"""MAML++ on Omniglot's standard split, 5-way 1-shot, at a 2-CPU-core budget.

``configs/omniglot_mamlpp.py`` (Antoniou, Edwards, Storkey 2019: five inner steps of 0.1,
learned per-layer per-step rates, the annealed multi-step loss, first order for 300
steps then second, per-step BatchNorm weights, cosine-annealed Adam at 1e-3, meta-batch 8,
1,000 meta-steps, held-out accuracy every 250) on the split of
``configs/omniglot_standard_support_hypernet.py`` (Vinyals et al. 2016: 1,200 / 423
characters by ``numpy.random.default_rng(data.split_seed=0)``, four rotations as four
classes) instead of the two small background subsets, scored as the other standard
configs: 1,000 fixed 5-way 1-shot meta-test episodes, 15 queries per class.

The budget is stated apart from the other gradient-based learners' (5,000 x 8,
``configs/omniglot_standard_maml.py``): 1,000 meta-steps x meta-batch 8. Five
second-order inner steps cost 7-12x MAML's one in wall time: this config ran 1,000 x 8
in 65.0 min with its five 1,000-episode evaluations, against MAML's 5,000 x 8 in 48.8
min (experiments/omniglot_standard/omniglot_learners.md); ``omniglot_mamlpp`` 1,000 x 8 in
2,695 s (load 3-6, five 600-episode evaluations) against MAML's 1,500 x 8 in 326 s
(experiments/RESULTS_meta.md); 5,000 steps would take 4-5 h on 2 cores. Its learning curve is the first 1,000 steps of the
others' on the same axes. The paper's budget (125,000 x 16):
configs/omniglot_standard_mamlpp_full.py.

    python -m hypernet.train --config=configs/omniglot_standard_mamlpp.py \
        --workdir=/tmp/hypernet/omniglot_standard_mamlpp \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_mamlpp")
  c.data.omniglot_zips = "images_background.zip,images_evaluation.zip"
  c.data.num_test_characters = 423   # 1,623 - 1,200 (Vinyals et al. 2016)
  c.data.split_seed = 0
  c.meta.eval_queries = 15
  c.meta.eval_episodes = 1000
  return c
