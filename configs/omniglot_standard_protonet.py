"""Prototypical Networks on Omniglot's standard split (Snell, Swersky, Zemel 2017).

The split of ``configs/omniglot_standard_support_hypernet.py`` (Vinyals et al. 2016):
all 1,623 characters of ``images_background.zip`` + ``images_evaluation.zip`` at 28x28,
sorted by name, permuted by ``numpy.random.default_rng(data.split_seed=0)``; 423 held out
for meta-testing, 1,200 meta-trained; each character's four rotations are four classes
(4,800 meta-training, 1,692 meta-test classes). The learner is ``"protonet"``
(hypernet/meta/protonet.py): the conv4 body embeds (64 features: the flattened output of
the last block); logits are negative squared Euclidean distances to the class prototypes
(Eq. 1-2), written into the target's Dense head per task, which is never trained.

As Snell et al. (Sec. 3.1): 1-shot episodes of higher way than tested, 5 queries per
class, Adam at 1e-3 halved every 2,000 episodes (1,000 meta-steps of two), no
distortion of the drawings (rotations as classes only). What fits 2 CPU cores differs:
two 40-way episodes a meta-step, 5,000 meta-steps (10,000 episodes; half the
support-conditioned hypernetwork config's meta-steps, and that config's episodes are
60-way as theirs) instead of their 60-way episodes until the validation loss stops
improving. That config also distorts the drawings and decays the rate by a cosine;
``--config.meta.train_ways=60 --config.optim.schedule=cosine
--config.data.augment_rotation=10 --config.data.augment_scale=0.2
--config.data.augment_shear=0.3 --config.data.augment_shift=2
--config.num_steps=10000`` trains this learner as that one is trained. One model per
seed serves all four settings (Snell et al. train a separate 5-shot model): tested on
1,000 fixed episodes of 5-way 1-shot (the run's own evaluation), and with
``python -m hypernet.evaluate --set meta.num_ways=20 ...`` (``meta.num_shots=5``) the
others, 15 queries per class. Snell et al. report 98.8 / 99.7 / 96.0 / 98.9% (5-way
1-/5-shot, 20-way 1-/5-shot). Their full budget: configs/omniglot_standard_protonet_full.py.

    python -m hypernet.train --config=configs/omniglot_standard_protonet.py \
        --workdir=/tmp/hypernet/omniglot_standard_protonet \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_maml")
  c.data.omniglot_zips = "images_background.zip,images_evaluation.zip"
  c.data.num_test_characters = 423   # 1,623 - 1,200 (Vinyals et al. 2016; Snell et al.)
  c.data.split_seed = 0
  c.meta.learner = "protonet"
  c.meta.eval_inner_steps = 0        # No inner loop (the learner ignores the count).
  c.meta.num_ways = 5
  c.meta.num_shots = 1
  c.meta.train_ways = 40             # Snell et al.: 60 (configs/omniglot_standard_protonet_full.py)
  c.meta.num_queries = 5             # Snell et al.'s 5 query points per class
  c.meta.eval_queries = 15
  c.meta.eval_episodes = 1000
  c.batch_size = 2                   # 40-way episodes per meta-step
  c.eval_batch_size = 50
  c.num_steps = 5000
  c.eval_every = 1000
  c.checkpoint_every = 500
  c.log_every = 100
  c.optim.name, c.optim.lr = "adam", 1e-3
  c.optim.schedule = "step"          # halved every 2,000 episodes (Snell et al.)
  c.optim.decay_every, c.optim.decay_rate = 1000, 0.5
  return c
