"""Split MNIST (5 tasks of 2 digits: {0,1}, {2,3}, ..., {8,9}) as von Oswald, Henning,
Grewe & Sacramento 2020 ("Continual learning with hypernetworks", ICLR; Table 1: HNET,
CL1, 99.79%) ran it, on the official MNIST: a task-conditioned chunked hypernetwork
generates every weight of the target and the output regulariser keeps the weights of
earlier tasks. Scored in CL1 (task given) and CL3 (task inferred from per-task input
densities, ``continual.task_inference="ppca"``; ``"entropy"`` is their HNET+ENT).

Their settings (chrhenning/hypercl, ``mnist/train_args_default.py``, split MNIST
classifier): target MLP 784-400-400 (ReLU), 2,000 iterations per task, batch 128, Adam
lr 1e-3; hypernetwork: chunks of 42,000 weights from a ReLU generator (10, 10) fed
[96-d chunk embedding; 96-d task embedding], beta 0.01, the regulariser at a look-ahead
step (their ``no_lookahead = False``). Here the same target 784-400-400-2 (475,202
weights), embeddings, batch, steps, step size, beta and look-ahead, a constant step (the
optimiser restarts per task). What differs:
- chunks of 21,000 from a (20, 20) generator: 447,968 trainable parameters, fewer than
  one target (compression 1.06x; theirs 0.98). The output head has about the same size,
  but a task now sets 23 chunks x 20 features instead of 12 x 10
  (docs/hypernetworks.md, "Chunk size at a fixed head");
- the output head's steps 10x larger (``hypernet.head_multiplier=10``): their head writes
  the weights directly, ours scales them by ~1/sqrt(fan_in) (docs/hypernetworks.md,
  "Head multiplier");
- every kernel generated output-major (``hypernet.output_major=True``): a chunk holds
  whole units' incoming weights, as in their PyTorch layout, not Keras' whole inputs'
  outgoing weights (docs/hypernetworks.md, "Output-major chunks");
- CL3 infers the task from input densities, not their HNET+TIR replay network.

Measured (CL1 final / during %, forgetting in points, CL3 final %; 2 shared cores;
experiments/RESULTS_continual.md). Three seeds as committed: 99.72 +- 0.05 (99.77 / 99.66
/ 99.72), forgetting 0.02 (the last task, 8 vs 9, learned to 99.14-99.55), CL3 92.85. In
Keras' layout (``--config.hypernet.output_major=False``): 99.67 +- 0.02 (99.67 / 99.64 /
99.69), forgetting -0.02, the last task 98.89-99.34. The rest in Keras' layout: beta 0.05
without the look-ahead (``--config.continual.beta=0.05 --config.continual.lookahead=False``):
99.53 +- 0.06; beta 0.05 with it: 99.49. With their (10, 10) generator on chunks of
42,000 and beta 0.05 without the look-ahead (``--config.hypernet.chunk_size=42000
--config.hypernet.hidden="(10,10)" --config.continual.beta=0.05
--config.continual.lookahead=False``): 99.24 +- 0.23, forgetting 0.01. On chunks of
42,000 without the look-ahead, seed 0: without the head multiplier, a cosine over each
task: beta 0.01 96.61 / 99.46 / 2.85, CL3 90.28; beta 0.05 98.88 / 99.24 / 0.36; beta
0.1 98.88 / 99.07 / 0.19; beta 0.05 with the look-ahead 98.33 / 99.36 / 1.02; a constant
step, beta 0.05: 98.95 / 99.09 / 0.13, CL3 92.49. With ``head_multiplier=10``, a
constant step: beta 0.05 99.35 / 99.37 / 0.01, CL3 92.70; beta 0.01 99.42 / 99.46 /
0.04; beta 0.02 99.28 / 99.33 / 0.05; ``head_multiplier=30`` 99.05 / 99.22 / 0.17.
Independent 400-400 networks on the same seeds (split_mnist_independent.py): 99.82.
0.07 short of the paper's 99.79: the last task is learned 0.15-0.56 points below an
independent network.

Baselines in the same loop and setting: split_mnist_{finetune,ewc,independent}.py.

    python -m hypernet.train --config=configs/split_mnist_hnet.py \
        --workdir=/tmp/hypernet/split_mnist_hnet --config.data.data_dir=../shared/data/mnist
    python experiments/continual.py --dataset=mnist --data_dir=../shared/data/mnist \
        --root=/tmp/hypernet/continual_mnist --seeds=0,1,2 --benchmarks=split
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "split_fmnist_hnet")
  c.data.name = "mnist"
  c.data.data_dir = ""           # IDX folder; pass --config.data.data_dir=../shared/data/mnist
  c.continual.num_tasks = 5
  c.continual.steps_per_task = 2000
  c.num_steps = 10000            # num_tasks * steps_per_task
  c.batch_size = 128
  c.continual.beta = 0.01         # theirs, with their look-ahead below
  c.continual.lookahead = True
  c.model.conv_widths = ()
  c.model.dense_widths = (400, 400)
  c.hypernet.kind = "chunked"
  c.hypernet.targets = "*"
  c.hypernet.chunk_size = 21000     # theirs 42,000 from (10, 10)
  c.hypernet.chunk_emb_dim = 96
  c.hypernet.hidden = (20, 20)
  c.hypernet.condition_dim = 96
  c.optim.lr = 1e-3
  c.optim.schedule = "constant"   # theirs (a cosine per task: docstring, 42,000-weight chunks)
  c.hypernet.head_multiplier = 10.0   # 1 at 42,000 / (10, 10), beta 0.05: 98.89 on seeds 0-2
  c.hypernet.output_major = True      # Keras' layout (False): 99.67 on seeds 0-2
  c.continual.task_inference = "ppca"
  c.continual.ppca_components = 20
  return c
