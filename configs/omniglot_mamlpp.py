"""MAML++ (Antoniou, Edwards, Storkey 2019, "How to train your MAML"), Omniglot 5-way
1-shot, conv4 target.

MAML++'s parts, each its own switch (hypernet/tasks/meta_learning.py): per-step
BatchNorm weights (``meta.per_step_bn_weights``; per-step running statistics,
``meta.bn_mode="per_step"``, are a switch too, off here: see the bn_mode line below),
learned per-layer per-step inner learning rates (``meta.lslr``), the multi-step loss
with annealed weights (``meta.multi_step_loss``, ``meta.msl_anneal_steps``), derivative-
order annealing (``meta.first_order_steps``: first order, then second), cosine annealing
of the meta learning rate (``optim.schedule="cosine"``). Five inner steps of 0.1 in
meta-training and at meta-test, as the paper; BatchNorm weights are not adapted in the
inner loop (the paper's setting), the convolutions and the head are. Second order with
the inner steps recomputed in the backward pass (``meta.recompute``: the same
meta-gradient, memory of one inner step).

Data defaults: the two background subsets of the Omniglot repository
(images_background_small1/2.zip), 50 characters held out (x4 rotations after the
split); meta-test: 600 fixed episodes on the held-out characters, accuracy with its 95%
interval. For the full set: --config.data.omniglot_zips=images_background.zip,
images_evaluation.zip --config.data.num_test_characters=423.

    python -m hypernet.train --config=configs/omniglot_mamlpp.py \
        --workdir=/tmp/hypernet/omniglot_mamlpp --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_maml")
  c.data.omniglot_zips = "images_background_small1.zip,images_background_small2.zip"
  c.data.num_test_characters = 50
  c.meta.learner = "maml"
  c.meta.inner_lr = 0.1
  c.meta.inner_steps = 5
  c.meta.eval_inner_steps = 5
  c.meta.adapt = "conv*,head/*"  # BatchNorm weights are meta-learned per step, not adapted
  # Batch statistics at meta-test, as MAML++'s code runs it (its per-step running
  # statistics are kept but never normalise): with the running statistics at meta-test
  # (bn_mode="per_step") the inner steps at the learned rates diverged in this config
  # (experiments/RESULTS_meta.md). The per-step BatchNorm weights stay on.
  c.meta.bn_mode = "transductive"
  c.meta.per_step_bn_weights = True
  c.meta.lslr = True
  c.meta.multi_step_loss = True
  c.meta.msl_anneal_steps = 300
  c.meta.first_order_steps = 300
  c.meta.recompute = True
  c.batch_size = 8  # the paper: 16 (twice the time per step)
  c.num_steps = 1000  # ~35 min on 2 CPU cores; the paper trains far longer
  c.eval_every = 250
  c.checkpoint_every = 250
  c.log_every = 100
  c.optim.lr = 1e-3
  c.optim.schedule = "cosine"
  return c
