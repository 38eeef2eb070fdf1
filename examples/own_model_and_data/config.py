"""The user's model and data trained by hypernet's own loop, with a chunked hypernetwork
generating every weight of the model:

    cd examples/own_model_and_data
    python -m hypernet.train --config=config.py --workdir=/tmp/own_model

(checkpoints, TensorBoard, resume, tf.distribute and the NaN guard as for any config).
"""
from hypernet import config_lib


def get_config():
  c = config_lib.base_config()
  c.model.name = "my_lab:make_model"    # my_lab.py beside this file
  c.data.name = "my_lab:load_data"
  c.hypernet.kind = "chunked"
  c.hypernet.targets = "*"              # every weight of my_resnet
  c.hypernet.chunk_size = 256
  c.hypernet.hidden = (16,)
  c.num_steps = 1500
  c.batch_size = 64
  c.log_every = 250
  c.eval_every = 500
  c.checkpoint_every = 500
  c.optim.lr = 5e-3
  return c
