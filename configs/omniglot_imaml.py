"""Implicit MAML (Rajeswaran, Finn, Kakade, Levine 2019), Omniglot 5-way 1-shot, conv4.

The inner problem is proximal-regularised, ``min_phi L_support(phi) + lambda/2
||phi - theta||^2`` (lambda: ``meta.proximal_lambda``), solved by gradient descent
(``meta.inner_steps`` steps of ``meta.inner_lr``); the meta-gradient is ``(I + H/lambda)^-1`` times the query gradient
by ``meta.cg_steps`` conjugate-gradient iterations on Hessian-vector products
(hypernet/meta/implicit.py): its memory does not grow with the inner steps. Here
lambda = 2, 5 CG steps and 16 inner steps of 0.1: a starting point, not tuned (Rajeswaran
et al. tune lambda per benchmark; their Omniglot runs use 5 CG steps).

Data defaults: the two background subsets of the Omniglot repository
(images_background_small1/2.zip), 50 characters held out (x4 rotations after the
split); meta-test: 600 fixed episodes on the held-out characters, accuracy with its 95%
interval.

    python -m hypernet.train --config=configs/omniglot_imaml.py \
        --workdir=/tmp/hypernet/omniglot_imaml --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_maml")
  c.data.omniglot_zips = "images_background_small1.zip,images_background_small2.zip"
  c.data.num_test_characters = 50
  c.meta.learner = "imaml"
  c.meta.inner_lr = 0.1
  c.meta.inner_steps = 16
  c.meta.eval_inner_steps = 16
  c.meta.proximal_lambda = 2.0
  c.meta.cg_steps = 5
  c.batch_size = 8
  c.num_steps = 1500  # ~30 min on 2 CPU cores
  c.eval_every = 250
  c.checkpoint_every = 250
  c.log_every = 100
  c.optim.lr = 1e-3
  c.optim.schedule = "cosine"
  return c
