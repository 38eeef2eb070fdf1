"""Split MNIST with independent low-rank adapters: ``configs/split_mnist_lora_hnet.py``
(a base learned on task 0, then frozen; rank-4 LoRA on every kernel) with each task's
factors ``A_t``, ``B_t`` held as parameters of their own (``hypernet.generator =
"table"``) instead of generated: nothing a later task trains touches an earlier task's
adapter, so there is nothing for the regulariser to keep (``continual.beta = 0``).

    python -m hypernet.train --config=configs/split_mnist_lora_independent.py \
        --workdir=/tmp/hypernet/split_mnist_lora_independent \
        --config.data.data_dir=../shared/data/mnist
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "split_mnist_lora_hnet")
  c.hypernet.generator = "table"
  c.continual.beta = 0.0
  return c
