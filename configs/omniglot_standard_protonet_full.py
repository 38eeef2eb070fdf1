"""Prototypical Networks on Omniglot's standard split at Snell et al.'s episode size.

``configs/omniglot_standard_protonet.py`` (its split, learner and evaluation) with
Snell, Swersky, Zemel 2017's training episodes (Sec. 3.1): one 60-way 1-shot episode a
meta-step with 5 queries per class, Adam at 1e-3 halved every 2,000 episodes, for
20,000 episodes. The paper gives no episode count: their code
(github.com/jakesnell/prototypical-networks) trains epochs of 100 episodes until the
validation loss has not improved for 200 epochs, then retrains on train + validation;
20,000 episodes is where the halving has cut the learning rate 1,024-fold. Their 5-shot
results come from a model trained 5-shot: ``--config.meta.num_shots=5``.
Three times the CPU config's images (20,000 x 60 x 6 against 5,000 x 2 x 40 x 6),
meant for a GPU; not run here beyond a smoke test.

    python -m hypernet.train --config=configs/omniglot_standard_protonet_full.py \
        --workdir=/tmp/hypernet/omniglot_standard_protonet_full \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_standard_protonet")
  c.meta.train_ways = 60             # Snell et al.'s training way
  c.batch_size = 1                   # one episode a meta-step, as their code
  c.optim.decay_every = 2000         # 2,000 episodes
  c.num_steps = 20000
  c.eval_every = 2000
  c.checkpoint_every = 1000
  return c
