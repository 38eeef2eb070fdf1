"""Second-order MAML, Omniglot 5-way 1-shot, conv4 target (Finn et al. 2017, Sec. 5.2).

Data: the Omniglot zips in config.data.data_dir (https://github.com/brendenlake/omniglot,
folder python/). 1200 characters of images_background + images_evaluation meta-train,
the other 423 meta-test, each rotated by 0/90/180/270 degrees into 4 classes *after*
the split (Finn et al.); 28x28 images. One inner step of size 0.4 in meta-training
(Finn et al.), three at meta-test; 600 fixed meta-test episodes on held-out characters,
accuracy with its 95% interval.

    python -m hypernet.train --config=configs/omniglot_maml.py \
        --workdir=/tmp/hypernet/omniglot_maml --config.data.data_dir=PATH/TO/omniglot

On the two-zip subset (images_background_small1/2.zip, 242 characters):
    --config.data.omniglot_zips=images_background_small1.zip,images_background_small2.zip
    --config.data.num_test_characters=50
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.task = "few_shot"
  c.data.name = "omniglot"
  c.data.data_dir = ""         # required: the folder with the zips
  c.data.omniglot_zips = "images_background.zip,images_evaluation.zip"
  c.data.num_test_characters = 423  # 1623 - 1200 (Finn et al.)
  c.data.rotations = (0, 90, 180, 270)
  c.model.name = "conv4"
  c.model.conv_widths = (64, 64, 64, 64)
  c.num_steps = 6000
  c.batch_size = 16            # tasks per meta-batch (Finn et al.: 32)
  c.eval_batch_size = 50       # meta-test tasks per evaluation step
  c.log_every = 100
  c.eval_every = 1000
  c.checkpoint_every = 500
  # Second order: XLA on CPU measured second-order errors up to 6e-3 relative to float64
  # (hypernet/meta/meta_batch.py); the plain graph agrees to 3e-7. Keep it off.
  c.jit_compile = "false"
  c.meta.learner = "maml"
  c.meta.num_ways = 5
  c.meta.num_shots = 1
  c.meta.num_queries = 5       # query drawings per class in meta-training
  c.meta.eval_queries = 5
  c.meta.inner_lr = 0.4
  c.meta.inner_steps = 1
  c.meta.eval_inner_steps = 3
  c.meta.eval_episodes = 600
  c.optim.lr = 1e-3
  c.optim.schedule = "constant"
  return c
