"""Support-conditioned hypernetwork on Lake et al.'s protocol for the 20 one-shot runs.

Lake, Salakhutdinov & Tenenbaum 2015 (Science), "Human-level concept learning through
probabilistic program induction": 20 official within-alphabet 20-way 1-shot runs
(``all_runs.zip``, one query per class, 400 queries), their drawings from the 20
evaluation alphabets; models learn from the background set only. Here meta-training
reads ``images_background.zip`` alone: all 30 background alphabets, all 964 characters
(x4 rotations: 3,856 classes), none held out (``data.num_test_characters = 0``), as
Lake et al.'s protocol uses the whole background set (Koch et al. 2015's Siamese
networks likewise, 8.0% error). The meta-test tasks are then the 20 runs themselves:
``one_shot_error`` is the error over their 400 queries (``accuracy`` = 1 - that, with its
95% interval over the 20 runs). A config reading ``images_evaluation.zip`` for training
and scoring the runs is refused before TensorFlow loads (the runs' characters would be
trained on).

As configs/omniglot_20way_support_hypernet.py otherwise (which meta-trains on the two
small background subsets and holds 20 of their characters out): the head generated
from each task's class prototypes, no inner gradient step, every meta-training drawing
distorted (Koch et al. 2015's affine sizes), tested 20-way 1-shot. Meta-training
episodes are drawn as the runs are: 20 characters of one alphabet in one rotation
(``meta.within_alphabet``), four episodes a meta-step (80 classes a step). The budget is
10,000 meta-steps (50-67 minutes a seed on 2 CPU cores beside other jobs), an
evaluation of the runs every 500; 5,000 (``--config.num_steps=5000``) gave 4.92% over
seeds 0-2. Targets: error <= 4.5% (people), stretch <= 3.3% (Bayesian program
learning).

    python -m hypernet.train --config=configs/omniglot_lake_support_hypernet.py \
        --workdir=/tmp/hypernet/omniglot_lake_support_hypernet \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_20way_support_hypernet")
  c.data.omniglot_zips = "images_background.zip"  # 30 alphabets, 964 characters
  c.data.num_test_characters = 0   # all 964 meta-trained; the 20 runs evaluate
  c.meta.one_shot_runs = "all_runs.zip"
  c.meta.num_ways = 20             # the runs: 20-way 1-shot, one query per class
  c.meta.num_shots = 1
  c.meta.eval_queries = 1
  # Episodes as the runs draw them: 20 characters of one alphabet (and rotation), four a
  # meta-step. Two 40-way episodes across alphabets, the same 80 classes a step, gave
  # 5.67% error over seeds 0-2 at 5,000 steps, against 4.92% within alphabets at 5,000
  # (experiments/RESULTS_benchmarks.md).
  c.meta.within_alphabet = True
  c.meta.train_ways = 20
  c.batch_size = 4
  c.eval_batch_size = 20           # the 20 runs in one evaluation batch
  c.num_steps = 10000
  c.eval_every = 500
  c.checkpoint_every = 500
  return c
