"""Second-order MAML on Omniglot's standard split, 5-way 1-shot, at a 2-CPU-core budget.

``configs/omniglot_maml.py`` (Finn et al. 2017, Sec. 5.2: conv4, one inner step of 0.4 in
meta-training, three at meta-test, Adam at 1e-3) on the split of
``configs/omniglot_standard_support_hypernet.py`` (Vinyals et al. 2016): all 1,623
characters sorted by name, permuted by ``numpy.random.default_rng(data.split_seed=0)``,
423 held out, 1,200 meta-trained, each character's four rotations four classes (4,800 /
1,692). Scored as the other standard configs: 1,000 fixed 5-way 1-shot meta-test
episodes, 15 queries per class, accuracy with its CI95; held-out accuracy every 500
meta-steps for the learning curve (``experiments/omniglot_learners.py``).

The budget: 5,000 meta-steps x meta-batch 8 (40,000 tasks), the meta-step count of the
standard ProtoNets config (the support-hypernetwork config: 10,000). Measured on 2 cores:
``omniglot_maml`` ran 1,500 x 8 in 326 s (experiments/RESULTS_meta.md); this config ran
3.3 meta-steps/s and scored 200 meta-test episodes in ~20 s beside two other trainings
(load ~5), so ~25 min of meta-training and ~15 min for its eleven 1,000-episode
evaluations at that load, less alone. Finn et al. train 60,000 x 32
(1.9M tasks, 48x this) with 1 query per class and strided convolutions instead of
max-pooling: configs/omniglot_standard_maml_full.py. ``configs/omniglot_standard_fomaml.py``
and ``omniglot_standard_anil.py`` are this config with another learner.

    python -m hypernet.train --config=configs/omniglot_standard_maml.py \
        --workdir=/tmp/hypernet/omniglot_standard_maml \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_maml")
  c.data.omniglot_zips = "images_background.zip,images_evaluation.zip"
  c.data.num_test_characters = 423   # 1,623 - 1,200 (Vinyals et al. 2016; Finn et al.)
  c.data.split_seed = 0
  c.meta.eval_queries = 15
  c.meta.eval_episodes = 1000
  c.batch_size = 8                   # Finn et al.: 32 (configs/omniglot_standard_maml_full.py)
  c.num_steps = 5000                 # Finn et al.: 60,000
  c.eval_every = 500
  return c
