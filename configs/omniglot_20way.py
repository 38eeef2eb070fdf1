"""MAML, Omniglot 20-way 1-shot, conv4; also scored on the official 20-way one-shot runs.

The official runs of Lake et al. 2015 (all_runs.zip) are 20-way 1-shot with one query
per class, so they are scored by a model meta-trained 20-way (the standard protocol:
MAML's head has one output per way): each run is one more meta-test task, adapted on
its 20 support drawings with the meta-test inner loop; ``one_shot_error`` is the error
rate over the 20 runs (400 queries). The runs' characters come from the evaluation
alphabets, so meta-training uses images_background.zip only (the background alphabets,
Lake et al.'s protocol); 200 of its characters are held out for the 600 meta-test
episodes.

First order by default (a meta-step is 1.1-1.2x cheaper than second order's on CPU at
meta-batch 16, measured by benchmarks/meta_bench.py: experiments/RESULTS_meta.md); ``--config.meta.learner=maml`` (and
``--config.jit_compile=false``) for Finn et al.'s second order.

    python -m hypernet.train --config=configs/omniglot_20way.py \
        --workdir=/tmp/hypernet/omniglot_20way --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.task = "few_shot"
  c.data.name = "omniglot"
  c.data.data_dir = ""
  c.data.omniglot_zips = "images_background.zip"  # not the runs' evaluation alphabets
  c.data.num_test_characters = 200
  c.model.name = "conv4"
  c.model.conv_widths = (64, 64, 64, 64)
  c.num_steps = 6000
  c.batch_size = 16
  c.eval_batch_size = 20
  c.log_every = 100
  c.eval_every = 1000
  c.checkpoint_every = 500
  c.jit_compile = "auto"       # first order (second order: set "false")
  c.meta.learner = "fomaml"
  c.meta.num_ways = 20
  c.meta.num_shots = 1
  c.meta.num_queries = 1       # the runs have one query per class
  c.meta.eval_queries = 1      # required by one_shot_runs (shapes and BatchNorm batch)
  c.meta.inner_lr = 0.4
  c.meta.inner_steps = 1
  c.meta.eval_inner_steps = 3
  c.meta.eval_episodes = 600
  c.meta.one_shot_runs = "all_runs.zip"
  c.optim.lr = 1e-3
  c.optim.schedule = "constant"
  return c
