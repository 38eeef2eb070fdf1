"""Baseline for mnist_ha_static.py: the MNIST network of Ha, Dai & Le 2016 (Sec. 4.1,
App. A.3.1, Table 7: test error 0.72%) trained directly, on the official MNIST.

Network: conv 7x7, 16 filters (28x28x1 -> 28x28x16), 2x2 max-pool, conv 7x7, 16 filters
(its kernel 7x7x16x16 = 12,544 weights), 2x2 max-pool, dense 784 -> 10; ReLU.
Recipe as in the paper: Adam, lr 1e-3, mini-batches of 1,000, training images padded
to 30x30 and randomly cropped back to 28x28 (``data.augment_shift = 1``).
What differs: the paper holds out 5,000 training images for early stopping and trains
on 55,000; here all 60,000 train for a fixed budget (``num_steps``, cosine decay of the
step) and the score is the final network's test error on the 10,000 t10k images. The
paper gives no budget; this one is the static hypernetwork's (mnist_ha_static.py).

    python -m hypernet.train --config=configs/mnist_ha_plain.py \
        --workdir=/tmp/hypernet/mnist_ha_plain --config.data.data_dir=../shared/data/mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.data.name = "mnist"
  c.data.data_dir = ""         # IDX folder; pass --config.data.data_dir=../shared/data/mnist
  c.data.augment_shift = 1     # pad to 30x30, random 28x28 crop (Ha et al. App. A.3.1)
  c.batch_size = 1000          # Ha et al. App. A.3.1
  c.eval_batch_size = 1000
  c.num_steps = 3000           # 50 epochs of 60,000 images
  c.log_every = 100
  c.eval_every = 500
  c.checkpoint_every = 500
  c.summaries.every = 0
  # The MNIST network of Ha et al. 2016 (Sec. 4.1): two 7x7 conv layers of 16 filters.
  c.model.conv_widths = (16, 16)
  c.model.kernel_size = 7
  c.model.dense_widths = ()
  c.optim.lr = 1e-3            # Ha et al. App. A.3.1
  c.hypernet.kind = "none"
  return c
