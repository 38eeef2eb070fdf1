"""Split MNIST with generated low-rank adapters: a base network learned on the first task,
then frozen, and per-task LoRA adapters (Hu et al. 2022) on every kernel generated from a
learned task embedding by a hypernetwork, whose outputs the regulariser of von Oswald et
al. 2020 keeps for earlier tasks (``config.hypernet.kind = "lora"``,
hypernet/hypernetworks/lora.py).

The setting of ``configs/split_mnist_hnet.py`` (5 tasks of 2 digits, target MLP
784-400-400-2, 2,000 steps per task, batch 128, Adam 1e-3 constant, beta 0.05, CL3 from
per-task PPCA densities), so the table in experiments/RESULTS_adapters.md puts it beside
HNET's full generation, fine-tuning and independent networks. Task ``t``'s kernels:

    W_t = W_0 + A(e_t) @ B(e_t),   A: [m, 4], B: [4, n],   B(e) = 0 at the start

``W_0`` trains on task 0 with its adapter (``hypernet.train_base``), then stays frozen
(``continual.freeze_base_after = 1``); biases stay at their initial zeros
(``hypernet.train_rest = False``). The generator: a 16-d task embedding and an 8-d
learned input through one hidden layer of 16 to the 9,544 factor scalars of a task.

    python -m hypernet.train --config=configs/split_mnist_lora_hnet.py \
        --workdir=/tmp/hypernet/split_mnist_lora_hnet --config.data.data_dir=../shared/data/mnist
    python experiments/continual.py --dataset=mnist --data_dir=../shared/data/mnist \
        --root=/tmp/hypernet/continual_mnist --seeds=0 --benchmarks=split \
        --methods=lora_hnet,lora_independent,hnet,finetune,independent
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "split_mnist_hnet")
  c.hypernet.kind = "lora"
  c.hypernet.targets = "*kernel"
  c.hypernet.train_rest = False       # biases stay at zero: nothing shared drifts
  c.hypernet.rank = 4
  c.hypernet.scale = 1.0
  c.hypernet.generator = "mlp"
  c.hypernet.hidden = (16,)
  c.hypernet.embedding_dim = 8
  c.hypernet.condition_dim = 16
  c.hypernet.train_base = True
  c.continual.freeze_base_after = 1
  c.continual.beta = 0.05           # as measured (split_mnist_hnet: 0.01 with the
  c.continual.lookahead = False      # look-ahead, von Oswald et al.'s)
  return c
