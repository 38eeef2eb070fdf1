"""The starting point for a run on your own model and data: a chunked hypernetwork that
generates every trainable weight of the model your factory builds, trained on the
images your function loads, with nothing of the digits job carried over (no
augmentation, every weight generated, no model fields of the built-in CNN).

    python -m hypernet.train --config=configs/plugin.py --workdir=/tmp/hypernet/mine \
        --config.model.name=my_lab:make_model --config.data.name=my_lab:load_data

``my_lab`` is importable (the working directory or ``PYTHONPATH``):
``make_model(input_shape, num_classes)`` returns a built ``keras.Model`` to logits and
``load_data()`` returns ``(x_train, y_train, x_test, y_test)`` (or a dict with those keys
and ``num_classes``), images ``[N, H, W, C]`` stored as uint8 or float; docs/keras.md,
"Plug-ins". Without the two flags it trains the built-in CNN on the embedded digits, so
the file runs as it is. Set ``--config.hypernet.kind=none`` for the model trained
directly, ``--config.hypernet.targets=PATTERNS`` to generate only some weights.
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.num_steps = 2000
  c.batch_size = 64
  c.eval_every = 200
  c.checkpoint_every = 500
  c.data.augment_shift = 0       # Your data is not assumed to be shift-invariant images.
  c.hypernet.kind = "chunked"
  c.hypernet.targets = "*"       # Every trainable weight of your model.
  c.optim.lr = 3e-3
  c.optim.schedule = "cosine"
  return c
