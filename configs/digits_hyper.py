"""The default main job: a chunked hypernetwork generates every conv and dense weight of
a small CNN, trained on the embedded 8x8 digits (no download), from 16,974
trainable parameters for 35,914 weights (compression 2.12x).

    python -m hypernet.train --config=configs/digits_hyper.py --workdir=/tmp/digits_hyper
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.data.name = "digits"
  c.data.augment_shift = 1     # +-1 pixel translations: the set has only 1,438 training images
  c.num_steps = 3000
  c.batch_size = 64
  c.log_every = 100
  # 16 evaluations (359 test images each): TensorBoard's default smoothing (0.6) of the
  # eval curve then ends within 0.2 points of the final accuracy (4 evaluations, the
  # first at chance, drew 89.57% for 98.61%).
  c.eval_every = 200
  c.checkpoint_every = 1000
  c.model.conv_widths = (32, 64)
  c.model.dense_widths = (64,)
  c.model.dropout = 0.3
  c.hypernet.kind = "chunked"
  c.hypernet.targets = "conv*/*,dense*/*,head/*"   # every weight of the target
  c.hypernet.chunk_size = 1024
  c.hypernet.chunk_emb_dim = 32
  c.hypernet.hidden = (14,)     # 36 x 32 embeddings + 1,486 generator + 15,360 head
  # The hypernetwork needs a larger step than direct training: with these sizes lr 1e-3
  # underfits (experiments/RESULTS_hypernets.md, "Why the chunked kind underfit").
  c.optim.lr = 5e-3
  return c
