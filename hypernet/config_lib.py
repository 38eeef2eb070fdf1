"""Config validation: fail before any training work, naming the field."""
from __future__ import annotations

_POSITIVE_INTS = ("num_steps", "batch_size", "eval_batch_size", "log_every",
                  "checkpoint_every", "checkpoint_keep")


def validate(config) -> None:
  """Checks the fields every config shares.

  Raises:
    ValueError: naming the bad field and what it must be.
  """
  for name in _POSITIVE_INTS:
    value = config.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
      raise ValueError(f"config.{name} must be a positive integer, got {value!r}.")
  if not isinstance(config.eval_every, int) or config.eval_every < 0:
    raise ValueError(f"config.eval_every must be an integer >= 0 (0: only at the end), got "
                     f"{config.eval_every!r}.")


def base_config():
  """The fields every experiment shares, with their defaults (configs/*.py start here).

  Returns:
    An ``ml_collections.ConfigDict``; experiment files override what differs.
  """
  import ml_collections  # pylint: disable=g-import-not-at-top
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.task = "classification"   # classification | multitask_classification
  c.num_steps = 1000
  c.batch_size = 64
  c.eval_batch_size = 256
  c.log_every = 100
  c.eval_every = 500
  c.checkpoint_every = 500
  c.checkpoint_keep = 3
  c.distribution = "auto"      # auto | one_device | mirrored | multi_worker | tpu
  c.jit_compile = "auto"       # auto (on for GPU/TPU, off on CPU) | true | false
  c.dtype_policy = "float32"   # float32 | mixed_bfloat16 | mixed_float16 (loss scaling)

  c.data = ml_collections.ConfigDict()
  c.data.name = "digits"       # digits | fashion_mnist | mnist
  c.data.data_dir = ""         # IDX folder; "" searches /usr/share/datasets/<name>
  c.data.test_fraction = 0.2   # digits only: held-out fraction per class
  c.data.augment_shift = 0     # random translation by up to this many pixels
  c.data.augment_flip = False  # random left-right flips

  c.model = ml_collections.ConfigDict()
  c.model.name = "cnn"         # cnn | mobilenet_v2 (keras.applications, weights=None)
  c.model.conv_widths = (32, 64)
  c.model.kernel_size = 3
  c.model.pool = "max"
  c.model.dense_widths = (64,)
  c.model.batch_norm = False
  c.model.dropout = 0.0
  c.model.alpha = 0.35         # mobilenet_v2: width multiplier
  c.model.image_size = 32      # mobilenet_v2: images are resized to this (>= 32)
  c.model.bn_momentum = 0.0    # mobilenet_v2: BatchNorm momentum (0: the application's 0.999)

  c.hypernet = ml_collections.ConfigDict()
  c.hypernet.kind = "none"     # none | mlp | chunked | static
  c.hypernet.targets = "*"     # glob/regex patterns of generated target weights
  c.hypernet.train_rest = True  # train target weights that are not generated
  c.hypernet.init = "hyperfan_in"  # hyperfan_in | hyperfan_out | glorot
  c.hypernet.hidden = (64,)    # mlp trunk / chunked generator hidden widths
  c.hypernet.embedding_dim = 8  # mlp: learned input embedding size
  c.hypernet.chunk_size = 1024  # chunked
  c.hypernet.chunk_emb_dim = 32  # chunked
  c.hypernet.z_dim = 4         # static (Ha et al. 2016): layer embedding size N_z
  c.hypernet.static_hidden_dim = 0  # static: d (0: d = N_z)
  c.hypernet.slice_channels = (16, 16)  # static: (N_in, N_out) of one basic kernel tile
  c.hypernet.num_conditions = 0  # > 0: conditional, one learned embedding per task id
  c.hypernet.condition_dim = 8   # size of a task embedding
  c.hypernet.quantize = "none"   # none | binary | ternary | int8 (straight-through)
  c.hypernet.quantize_targets = "*kernel"  # generated paths that are quantised

  # task = "multitask_classification": the batch is split among num_conditions tasks;
  # task t relabels class y as (y + t) mod num_classes when label_shift is set.
  c.multitask = ml_collections.ConfigDict()
  c.multitask.label_shift = True

  # Meta-learning (config.task = "few_shot" | "sinusoid"; hypernet/meta_tasks.py).
  # config.batch_size is then the meta-batch size (tasks per step), eval_batch_size the
  # tasks per evaluation batch.
  c.data.omniglot_zips = "images_background.zip"  # comma-separated, in data.data_dir
  c.data.num_test_characters = 200  # Omniglot characters held out for meta-testing
  c.data.split_seed = 0        # seed of the train/test character split
  c.data.rotations = (0, 90, 180, 270)  # class augmentation (Finn et al. 2017)
  c.data.image_size = 28
  c.meta = ml_collections.ConfigDict()
  c.meta.learner = "maml"      # maml | fomaml | metasgd | anil
  c.meta.num_ways = 5          # N (few_shot)
  c.meta.num_shots = 1         # K: support examples per class (sinusoid: support points)
  c.meta.num_queries = 1       # query examples per class in meta-training (sinusoid: points)
  c.meta.eval_queries = 1      # query examples per class in meta-testing
  c.meta.inner_lr = 0.4
  c.meta.inner_steps = 1
  c.meta.eval_inner_steps = 0  # inner steps at meta-test time; 0: inner_steps
  c.meta.adapt = ""            # patterns of adapted weights ("": all trainable)
  c.meta.anil_head = "head/*"  # ANIL: the adapted head
  c.meta.eval_episodes = 600   # fixed meta-test tasks on held-out classes
  c.meta.eval_seed = 12345     # seed of those tasks
  c.meta.one_shot_runs = ""    # e.g. "all_runs.zip" in data.data_dir: 20-way runs
  c.meta.parallel = "map_fn"   # map_fn | vectorized_map (tasks of a meta-batch)
  c.meta.mlp_widths = (40, 40)  # sinusoid regressor (ReLU), Finn et al. 2017 Sec. 5.1

  c.optim = ml_collections.ConfigDict()
  c.optim.name = "adam"        # adam | adamw | sgd
  c.optim.lr = 1e-3
  c.optim.schedule = "cosine"  # constant | cosine
  c.optim.warmup_steps = 0
  c.optim.weight_decay = 0.0
  c.optim.momentum = 0.9
  c.optim.grad_clip_norm = 0.0
  return c
