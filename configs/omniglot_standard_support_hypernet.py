"""Support-conditioned hypernetwork on Omniglot's standard split (Vinyals et al. 2016).

All 1,623 characters of ``images_background.zip`` + ``images_evaluation.zip`` at 28x28.
The split: the characters sorted by name (``Alphabet/characterNN``), permuted by
``numpy.random.default_rng(data.split_seed)``, the first 423 of the permutation held out
for meta-testing and the other 1,200 meta-trained
(:func:`hypernet.data.omniglot.split_by_character`); then each character's four
rotations (0/90/180/270) become four classes: 4,800 meta-training and 1,692 meta-test
classes, no meta-test character in meta-training. ``data.split_seed`` is fixed at 0 and
does not follow ``config.seed``, so every seed meets the same split.

One model per seed serves all four settings (as Snell et al. 2017 test a model at other
ways than it was trained at): meta-trained on 60-way 1-shot episodes across all
alphabets (Snell et al.'s training way; two a meta-step for 10,000 meta-steps, the
rate's cosine over them, every drawing distorted as Koch et al. 2015), then tested on
1,000 fixed episodes each of 5-way 1-shot (the training run's own evaluation), and with
``experiments/omniglot_standard.py`` 5-way 5-shot, 20-way 1-shot and 20-way 5-shot
(``python -m hypernet.evaluate --set meta.num_ways=20 ...``), 15 queries per class.

Measured (experiments/RESULTS_benchmarks.md), seeds 0-2: 99.35 / 99.76 / 97.93 / 99.34
(5w1s / 5w5s / 20w1s / 20w5s; MAML++ 99.47 / 99.93 / 97.65 / 99.33). Two 40-way
episodes a step (``--config.meta.train_ways=40``): 99.31 / 99.74 / 97.73 / 99.29; that
with half the steps (``--config.num_steps=5000`` too): 99.22 / 99.72 / 97.31 / 99.20. A
5-shot model (``--config.meta.train_ways=40 --config.meta.num_shots=5``, seeds 0-1):
99.20 / 99.77 / 97.20 / 99.32, no gain in the 5-shot settings.
Steps 2,000-10,000 took 57 min a seed with two at once on 2 cores (Intel Xeon,
Sapphire Rapids class; 2.3-2.4 steps/s, against 3.3-3.4 at 40-way).

    python -m hypernet.train --config=configs/omniglot_standard_support_hypernet.py \
        --workdir=/tmp/hypernet/omniglot_standard_support_hypernet \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_support_hypernet")
  c.data.omniglot_zips = "images_background.zip,images_evaluation.zip"
  c.data.num_test_characters = 423   # 1,623 - 1,200 (Vinyals et al. 2016; Finn et al.)
  c.data.split_seed = 0
  c.meta.num_ways = 5
  c.meta.num_shots = 1
  c.meta.train_ways = 60       # Snell et al.'s; 40: -0.04 / -0.02 / -0.20 / -0.05 (3 seeds)
  c.meta.eval_queries = 15
  c.meta.eval_episodes = 1000
  c.batch_size = 2
  c.eval_batch_size = 50
  c.num_steps = 10000
  c.eval_every = 1000
  return c
