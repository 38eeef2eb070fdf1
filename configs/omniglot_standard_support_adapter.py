"""Adapters from a support set on Omniglot's standard split (CNAPs with generated LoRA).

The data, split, episodes and optimiser of ``configs/omniglot_standard_protonet.py``
(1,200 meta-training / 423 meta-test characters of ``images_background.zip`` +
``images_evaluation.zip`` at 28x28, each rotation a class; two 40-way 1-shot episodes of
5 queries per class a meta-step, 5,000 meta-steps, Adam at 1e-3 halved every 1,000
steps; tested on 1,000 fixed 5-way 1-shot episodes of 15 queries per class). The
learner is ``"support_adapter"`` (hypernet/meta/support_adapter.py): for each episode
the conv4 body embeds the support set at its base weights, the mean of the class
prototypes (``[64]``) conditions a LoRA hypernetwork (Hu et al. 2022; an MLP with one
hidden layer of 32, ``generator="mlp"``) that generates rank-4 adapters
``W_0 + A(e) @ B(e)`` of the four conv kernels (each ``[3, 3, in, out]`` read as
``[9 in, out]``), and the query set is classified by squared Euclidean distances to the
prototypes of the adapted body (Snell et al. 2017, Eq. 2), as CNAPs (Requeima et al.
2019) classify with a body adapted from the support set. ``B`` starts at zero, so the
run starts as ``omniglot_standard_protonet`` starts; the base body, the generator
(265,156 parameters, 2.4 times the body's 111,936) and nothing else are meta-trained.

Not trained here yet: no result is claimed. ``python -m hypernet.evaluate --set
meta.num_ways=20 ...`` (``meta.num_shots=5``) scores the other settings, as for Prototypical
Networks (the head is written per task, trained 40-way).

    python -m hypernet.train --config=configs/omniglot_standard_support_adapter.py \
        --workdir=/tmp/hypernet/omniglot_standard_support_adapter \
        --config.data.data_dir=PATH/TO/omniglot
"""
from hypernet import config_lib


def get_config():
  c = config_lib.sibling_config(__file__, "omniglot_standard_protonet")
  c.meta.learner = "support_adapter"
  c.meta.adapt = "conv*/kernel"      # the conv kernels get adapters (not the head)
  c.meta.rank = 4
  c.meta.adapter_scale = 1.0
  c.meta.generator_widths = (32,)
  c.meta.task_dim = 0                # the mean prototype [64] is the condition itself
  c.meta.train_base = True           # the base body is meta-trained with the generator
  return c
