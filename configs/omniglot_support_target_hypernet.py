"""The whole conv4 target generated from the support set, Omniglot 5-way 1-shot.

As configs/omniglot_support_hypernet.py (the head generated from the class prototypes),
and the body's four convolution kernels generated per task too: a chunked hypernetwork
maps the support set's mean body feature (the task embedding, 64-d) to the kernels as
``w0 + gamma * H(z)``, with the gate ``gamma`` learned from 0, so training starts from
the head-only learner (hypernet/meta/support_target.py). The hypernetwork is sized by
the config.hypernet fields of its kind (chunks of 1,024 weights, 32-d chunk embeddings,
one 64-unit hidden layer: 76,257 parameters for the conv4 body's 111,168 kernel weights).

Data and meta-test as configs/omniglot_support_hypernet.py: the two background subsets,
50 characters held out, 600 fixed 5-way 1-shot episodes with a 95% interval; the
meta-training episodes are 5-way (16 per meta-batch, 3,000 meta-steps) and not distorted.

    python -m hypernet.train --config=configs/omniglot_support_target_hypernet.py \
        --workdir=/tmp/hypernet/omniglot_support_target_hypernet \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_support_hypernet")
  c.meta.body_hypernet = "chunked"
  c.meta.body_targets = "conv*/kernel"
  c.meta.gate = 0.0
  c.hypernet.chunk_size = 1024
  c.hypernet.chunk_emb_dim = 32
  c.hypernet.hidden = (64,)
  # Undistorted drawings: the measured comparison with the head-only learner
  # (experiments/RESULTS_meta.md) is without the distortions.
  c.data.augment_rotation = c.data.augment_scale = c.data.augment_shear = 0.0
  c.data.augment_shift = 0
  c.meta.train_ways, c.batch_size, c.num_steps = 0, 16, 3000  # 5-way, 16 tasks, 3,000 steps
  return c
