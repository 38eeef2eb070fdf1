"""No drift: every registered hypernetwork kind is reached from the command line's config
validation, the Trainer's weight-source builder and ``hn.keras.HyperModel``, every
registered data set from config validation and ``load_classification``, and the
TensorFlow-free reading of the entries' fields (``Registry.declared``, used by the config
schema) agrees with the imported constructors and loaders (``Registry.config_fields``)."""
import functools
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import hypernet as hn
from hypernet import data as data_lib
from hypernet.core import functional
from hypernet.hypernetworks import base
from hypernet.hypernetworks import source
from hypernet import config_lib

from hypernet.tasks import targets
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OWN_KIND = os.path.join(REPO, "examples", "own_hypernetwork")
PLUGIN = "lowrank_hypernet:LowRankHypernetwork"
KINDS = base.KINDS.names()
DATASETS = data_lib.DATASETS.names()


@pytest.fixture
def own_kind_on_path(monkeypatch):
  monkeypatch.syspath_prepend(OWN_KIND)


def _target():
  return targets.make_cnn((8, 8, 1), 10, conv_widths=(4, 8), dense_widths=(16,))


def _config(kind):
  c = config_lib.base_config()
  c.hypernet.kind = kind
  c.hypernet.targets = "conv*/kernel"   # Every kind (static too) generates conv kernels.
  return c


def test_the_registry_lists_the_kinds_and_the_schema_reads_the_same_ones():
  assert KINDS == ("chunked", "lora", "mlp", "static")
  assert {n: c.__name__ for n, c in base.KINDS.items()} == {
      "chunked": "ChunkedHypernetwork", "lora": "LoRAHypernetwork", "mlp": "MLPHypernetwork",
      "static": "StaticHypernetwork"}
  twin = config_lib.SELECTED_GROUPS["hypernet"][1]
  assert (twin.family, twin.field, twin.package, twin.base) == (
      base.KINDS.family, base.KINDS.field, base.KINDS.package, base.KINDS.base)
  assert twin.declared_names() == KINDS


@pytest.mark.parametrize("kind", KINDS)
def test_static_fields_agree_with_the_imported_constructor(kind):
  declared = base.KINDS.declared()[kind]
  assert declared == base.KINDS.config_fields(kind)
  assert "target_spec" not in declared and "seed" not in declared
  # Every field is in config.hypernet by its own name, with the constructor's default
  # unless the config starts elsewhere (listed in _GROUP_DEFAULTS).
  group = config_lib.base_config().hypernet
  overrides = config_lib._GROUP_DEFAULTS["hypernet"]  # pylint: disable=protected-access
  for field, default in declared.items():
    assert field in group, field
    assert group[field] == overrides.get(field, default), field


def test_plugin_fields_read_statically_agree_with_the_imported_class(own_kind_on_path):
  declared = base.KINDS.declared_fields(PLUGIN)
  assert declared == {"rank": 4, "init": "hyperfan_in", "num_conditions": 0,
                      "condition_dim": 0}   # The last two through **kwargs from the base.
  assert declared == base.KINDS.config_fields(PLUGIN)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_passes_the_command_lines_validation(kind):
  c = _config(kind)
  config_lib.validate(c)
  used = config_lib.used_fields(c)
  fields = base.KINDS.config_fields(kind)
  # The run reads exactly the kind's fields (condition ones only when conditional).
  kind_fields = {k[len("hypernet."):] for k in used if k.startswith("hypernet.")} - {
      "kind", "targets", "train_rest", "quantize"}
  assert kind_fields == {f for f in fields if not f.startswith("condition_")}, kind_fields


def test_validation_reads_the_kinds_without_tensorflow(own_kind_on_path):
  """Built-in kinds validate TensorFlow-free (read from source); a plug-in kind is imported
  (its module may import TensorFlow) so that its real constructor, base and re-exports
  count."""
  code = ("import sys; from hypernet import config_lib as c; "
          "k = c.base_config(); k.hypernet.kind = 'static'; c.validate(k); "
          "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules; "
          f"k.hypernet.kind = {PLUGIN!r}; k.hypernet.rank = 8; c.validate(k); "
          "print('TF-FREE', c.CHOICES['hypernet.kind'])")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, OWN_KIND]))
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=120, cwd=REPO)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "TF-FREE ('none', 'chunked', 'lora', 'mlp', 'static')" in out.stdout


def test_a_plugin_kinds_own_fields_are_accepted_and_others_refused(own_kind_on_path):
  c = _config(PLUGIN)
  config_lib.validate(c)   # rank has a default: the config may leave it out.
  c.hypernet.rank = 8
  config_lib.validate(c)
  assert config_lib.used_fields(c)["hypernet.rank"] == 8
  c.hypernet.rnak = 3
  with pytest.raises(config_lib.ConfigError,
                     match=r"^config\.hypernet\.rnak is not a known field\. Did you mean "
                           r"config\.hypernet\.rank\?") as e:
    config_lib.validate(c)
  assert "\n" not in str(e.value)
  del c.hypernet["rnak"]
  with c.ignore_type():
    c.hypernet.rank = "8"
  with pytest.raises(config_lib.ConfigError, match=r"config\.hypernet\.rank='8' has type str"):
    config_lib.validate(c)
  c.hypernet.kind = "lowrank_hypernet:NoSuchClass"
  with pytest.raises(config_lib.ConfigError, match="has no attribute 'NoSuchClass'"):
    config_lib.validate(c)
  c.hypernet.kind = "no_such_module:Kind"
  with pytest.raises(config_lib.ConfigError,
                     match=r"cannot import module 'no_such_module' .*put it on PYTHONPATH"):
    config_lib.validate(c)


@pytest.mark.parametrize("kind", KINDS + (PLUGIN,))
def test_every_kind_builds_through_the_trainers_weight_source(kind, monkeypatch,
                                                              own_kind_on_path):
  """build_weight_source hands the kind exactly config.hypernet's fields that its
  constructor names, by name; the target runs on the generated weights."""
  c = _config(kind)
  if kind == PLUGIN:
    c.hypernet.rank = 3
  c.hypernet.init = "glorot"
  cls = base.KINDS.get(kind)
  received = {}
  original = cls.__init__

  @functools.wraps(original)
  def spy(self, *args, **kwargs):
    received.update(kwargs)
    original(self, *args, **kwargs)

  monkeypatch.setattr(cls, "__init__", spy)
  target = _target()
  weight_source = source.build_weight_source(c, target)
  assert isinstance(weight_source, hn.WeightSource)
  assert type(weight_source.hypernetwork) is cls
  fields = base.KINDS.config_fields(kind)
  expected = {k: c.hypernet[k] for k in fields if k != "condition_dim"}
  assert {k: received[k] for k in expected} == expected
  assert received["condition_dim"] == 0   # Unconditional (num_conditions=0).
  assert weight_source.generated_paths == ["conv1/kernel", "conv2/kernel"]
  x = tf.random.normal([2, 8, 8, 1])
  out = functional.functional_call(target, weight_source.weights(), x)
  assert out.shape == (2, 10) and np.all(np.isfinite(out.numpy()))


@pytest.mark.parametrize("kind", KINDS + (PLUGIN, "class"))
def test_every_kind_trains_and_round_trips_through_keras(kind, own_kind_on_path):
  if kind == "class":   # The class itself, as a user passes their own.
    import lowrank_hypernet  # pylint: disable=g-import-not-at-top
    kind = lowrank_hypernet.LowRankHypernetwork
  keras.utils.set_random_seed(0)
  model = hn.keras.HyperModel(_target(), kind, targets="conv*/kernel")
  model.compile(optimizer=keras.optimizers.Adam(1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  x = np.random.default_rng(0).normal(size=(16, 8, 8, 1)).astype("float32")
  y = np.arange(16) % 10
  before = [v.numpy().copy() for v in model.hypernetwork.trainable_variables]
  model.fit(x, y, batch_size=16, epochs=1, verbose=0)
  assert any(not np.array_equal(b, v.numpy())
             for b, v in zip(before, model.hypernetwork.trainable_variables))
  config = model.get_config()
  name = base.KINDS.name_of(type(model.hypernetwork))
  assert config["hypernetwork"] == name == (kind if isinstance(kind, str) else PLUGIN)
  rebuilt = hn.keras.HyperModel.from_config(config)
  assert type(rebuilt.hypernetwork) is type(model.hypernetwork)
  assert [v.shape for v in rebuilt.hypernetwork.trainable_variables] == \
      [v.shape for v in model.hypernetwork.trainable_variables]


def test_a_constructors_error_reads_as_one_line_naming_the_field(tmp_path):
  """A kind's range lives in its constructor; the command line prints its error as one
  line naming config.hypernet and the argument (the field of the same name), and leaves
  no workdir behind."""
  out = subprocess.run(
      [sys.executable, "-m", "hypernet.train", "--config=configs/digits_hyper.py",
       f"--workdir={tmp_path / 'run'}", "--config.hypernet.chunk_size=0"],
      cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), capture_output=True, text=True,
      timeout=300)
  assert out.returncode == 1, out.stderr[-2000:]
  last = out.stderr.strip().splitlines()[-1]
  assert last == ("train.py: error: config.hypernet (kind 'chunked'): chunk_size (0), "
                  "chunk_emb_dim (32) and hidden (14,) must be positive."), out.stderr[-2000:]
  assert "Traceback" not in out.stderr and not (tmp_path / "run").exists()


# -- data sets (hypernet/data: DATASETS) ----------------------------------------------------
def test_the_registry_lists_the_data_sets_and_the_schema_reads_the_same_ones():
  assert DATASETS == ("digits", "fashion_mnist", "mnist")
  assert {n: f.__name__ for n, f in data_lib.DATASETS.items()} == {
      "digits": "load_digits", "fashion_mnist": "load_fashion_mnist", "mnist": "load_mnist"}
  assert data_lib.DATASETS.declared_names() == DATASETS
  assert config_lib.CHOICES["data.name"] == DATASETS + ("omniglot",)


@pytest.mark.parametrize("name", DATASETS)
def test_a_data_sets_static_fields_agree_with_the_imported_loader(name):
  declared = data_lib.DATASETS.declared()[name]
  assert declared == data_lib.DATASETS.config_fields(name)
  group = config_lib.base_config().data
  for field, default in declared.items():   # In config.data by its own name and default.
    assert group[field] == default, field
  assert "split_seed" not in data_lib.DATASETS.declared()["digits"]   # Excluded: fixed.


def _data_config(name, data_dir):
  c = config_lib.base_config()
  c.data.name = name
  if name != "digits":
    folder = data_dir / name.replace("_", "-")
    if not folder.is_dir():
      pytest.skip(f"{name}: no IDX files in {folder} (the shared test data lacks them).")
    c.data.data_dir = str(folder)
  return c


@pytest.mark.parametrize("name", DATASETS)
def test_every_data_set_passes_validation_and_loads(name, data_dir, monkeypatch):
  """Validation accepts the name and counts exactly the loader's own fields as used;
  load_classification calls the registered loader with those fields of config.data."""
  c = _data_config(name, data_dir)
  config_lib.validate(c)
  used = config_lib.used_fields(c)
  loader_fields = set(config_lib.DATASETS.declared_defaults())
  assert {f for f in loader_fields if f"data.{f}" in used} == set(
      data_lib.DATASETS.declared()[name])
  received = {}
  loader = data_lib.DATASETS.get(name)

  @functools.wraps(loader)   # The loader's signature: build reads its fields from it.
  def spy(**kwargs):
    received.update(kwargs)
    return loader(**kwargs)

  monkeypatch.setitem(data_lib.DATASETS._classes, name, spy)  # pylint: disable=protected-access
  c.data.test_fraction = 0.25
  d = data_lib.load_classification(c.data)
  assert received == {k: c.data[k] for k in data_lib.DATASETS.declared()[name]}
  assert d.name == name and d.num_classes == 10
  assert len(d.x_train) and len(d.x_test) and d.x_train.dtype == np.uint8
  if name == "digits":   # test_fraction reaches the loader: 25% of each class held out.
    assert len(d.x_test) == 450 and len(d.x_train) == 1797 - 450


def test_an_unknown_data_set_lists_the_registered_ones():
  c = config_lib.base_config()
  c.data.name = "cifar"
  with pytest.raises(config_lib.ConfigError, match=r"config\.data\.name='cifar' is not one "
                     r"of \['digits', 'fashion_mnist', 'mnist', 'omniglot'\]"):
    config_lib.validate(c)
  with pytest.raises(ValueError, match=r"^config\.data\.name='cifar' is not a known data set; "
                     r"known: \['digits', 'fashion_mnist', 'mnist'\], or 'tfds:NAME' or your "
                     r"own loader as 'package\.module:function'\.$"):
    data_lib.load_classification(c.data)


def test_a_function_registry_builds_plugins_and_reads_them_from_source(tmp_path,
                                                                        monkeypatch):
  """Functions as entries: a plug-in function's fields read from source agree with its
  signature, build calls it with the group's fields it names, and a non-callable plug-in
  is refused naming the field."""
  (tmp_path / "my_sets.py").write_text(
      "SIZE = 3\n"
      "def load_ones(size=4, data_dir='', *, seed=0):\n"
      "  return [1] * size, data_dir, seed\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  registry = data_lib.DATASETS
  assert registry.declared_fields("my_sets:load_ones") == {"size": 4, "data_dir": "",
                                                           "seed": 0}
  assert registry.config_fields("my_sets:load_ones") == {"size": 4, "data_dir": "", "seed": 0}
  assert registry.build("my_sets:load_ones", {"size": 2, "other": 1}, seed=5) == (
      [1, 1], "", 5)
  with pytest.raises(ValueError, match=r"config\.data\.name='my_sets:SIZE': 'SIZE' is a "
                                       r"int, not a function or class"):
    registry.get("my_sets:SIZE")


def test_the_config_check_asks_the_chosen_kind_which_weights_it_can_generate(tmp_path,
                                                                           monkeypatch):
  """check_target_patterns calls the kind's check_target_spec with the selected weights'
  shapes (any kind, a plug-in too), and reports its objection naming the field."""
  (tmp_path / "picky_kind.py").write_text(
      "from hypernet.hypernetworks import mlp\n"
      "class KernelsOnly(mlp.MLPHypernetwork):\n"
      "  @classmethod\n"
      "  def check_target_spec(cls, target_spec):\n"
      "    for path, shape in target_spec.items():\n"
      "      if len(shape) < 2:\n"
      "        raise ValueError(f'{path!r} of shape {tuple(shape)} is no kernel.')\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  c = _config("picky_kind:KernelsOnly")
  source.check_target_patterns(c, _target())   # conv*/kernel: accepted.
  c.hypernet.targets = "conv*/*"
  with pytest.raises(config_lib.ConfigError,
                     match=r"^config\.hypernet\.targets='conv\*/\*' \(config\.hypernet\.kind="
                           r"'picky_kind:KernelsOnly'\): 'conv1/bias' of shape \(4,\) is no "
                           r"kernel\.$"):
    source.check_target_patterns(c, _target())
  c.hypernet.kind = "mlp"   # The default hook accepts any weight.
  source.check_target_patterns(c, _target())


def test_every_task_is_registered_declared_and_run_by_a_committed_config():
  """No drift for tasks: the registry (imported), the schema's choices (read from source,
  TensorFlow-free) and build_task agree, and every registered task is what some
  committed config runs (each config has a smoke test: tests/test_hypernet_train.py,
  test_meta_tasks.py, test_continual.py)."""
  from hypernet import tasks  # pylint: disable=import-outside-toplevel
  names = tasks.TASKS.names()
  assert names == config_lib.TASKS.declared_names() == config_lib.CHOICES["task"]
  for name, cls in tasks.TASKS.items():
    assert issubclass(cls, tasks.Task) and not tasks.protocol.missing_members(cls), name
  configs = os.path.join(REPO, "configs")
  run = {config_lib.load_config_file(os.path.join(configs, f)).task
         for f in os.listdir(configs) if f.endswith(".py")}
  assert set(names) <= run, f"no committed config runs {sorted(set(names) - run)}"
  with pytest.raises(ValueError, match=r"config.task='nope' is not a known task; known: "):
    c = config_lib.base_config()
    c.task = "nope"
    tasks.build_task(c)


# -- learners: config.meta's learner fields are the constructors' arguments ---------------
LEARNERS = hn.meta.LEARNERS.names()
OWN_LEARNER_DIR = os.path.join(REPO, "examples", "own_learner")
OWN_LEARNER = "my_learner:PerLayerMAML"
# The meta-learning task's own fields a few-shot Omniglot run reads, whatever the learner.
EPISODE_FIELDS = {"learner", "num_ways", "num_shots", "num_queries", "eval_queries",
                  "eval_inner_steps", "eval_steps_sweep", "eval_episodes", "eval_seed",
                  "one_shot_runs", "within_alphabet", "parallel", "parallel_iterations",
                  "staggered", "fused_blocks", "train_before_metrics", "first_order_steps",
                  "bn_mode", "per_step_bn_weights"}


def _meta_config(learner):
  c = config_lib.load_config_file(os.path.join(REPO, "configs", "omniglot_maml.py"))
  c.meta.learner = learner
  return c


def test_the_registry_lists_the_learners_and_the_schema_reads_the_same_ones():
  assert LEARNERS == ("anil", "fomaml", "imaml", "maml", "metasgd", "protonet",
                      "support_adapter", "support_hypernet")
  selector, twin = config_lib.SELECTED_GROUPS["meta"]
  assert selector == "learner" and twin is config_lib.LEARNERS
  assert (twin.family, twin.field, twin.package, twin.base) == (
      hn.meta.LEARNERS.family, hn.meta.LEARNERS.field, hn.meta.LEARNERS.package,
      hn.meta.LEARNERS.base)
  assert twin.declared_names() == LEARNERS == config_lib.CHOICES["meta.learner"]


@pytest.mark.parametrize("learner", LEARNERS)
def test_a_learners_static_fields_agree_with_the_imported_constructor(learner):
  declared = config_lib.LEARNERS.declared()[learner]
  assert declared == hn.meta.LEARNERS.config_fields(learner)
  assert not {"model", "loss_fn", "name", "seed", "body", "head_model"} & set(declared)
  # In config.meta by its own name, with the constructor's default unless the config
  # starts elsewhere (listed in _GROUP_DEFAULTS).
  group = config_lib.base_config().meta
  overrides = config_lib._GROUP_DEFAULTS["meta"]  # pylint: disable=protected-access
  for field, default in declared.items():
    assert field in group, field
    assert group[field] == overrides.get(field, default), field


def test_learner_fields_are_read_statically_across_modules_of_one_class_name():
  """inner_loop.MetaSGD (the learner) and rules.MetaSGD (its rule) share a class name: the
  learner's fields are its own (through **kwargs, MAML's), not the rule's."""
  fields = config_lib.LEARNERS.declared()["metasgd"]
  assert {"inner_lr", "inner_steps", "adapt", "zero_init", "recompute"} <= set(fields)
  assert not {"inner_rule", "lslr", "inner_momentum"} & set(fields)   # Its rule's own.
  assert "first_order" not in config_lib.LEARNERS.declared()["fomaml"]


@pytest.mark.parametrize("learner", LEARNERS + (OWN_LEARNER,))
def test_every_learner_validates_and_the_run_reads_exactly_its_fields(learner,
                                                                      monkeypatch):
  monkeypatch.syspath_prepend(OWN_LEARNER_DIR)
  c = _meta_config(learner)
  if learner == "imaml":
    c.meta.inner_steps = 2
  config_lib.validate(c)
  used = {k[len("meta."):] for k in config_lib.used_fields(c) if k.startswith("meta.")}
  fields = config_lib.LEARNERS.declared_fields(learner)
  own = {"support_hypernet": {"train_ways", "body_hypernet"},
         "protonet": {"train_ways"}, "support_adapter": {"train_ways"}}.get(learner, set())
  assert used - set(fields) == EPISODE_FIELDS | own
  assert set(fields) <= used


@pytest.mark.parametrize("learner", LEARNERS)
def test_make_learner_hands_each_learner_its_config_fields_by_name(learner, monkeypatch):
  """The task builds the learner from config.meta by the constructor's own names: no
  translation (ANIL's head, support_hypernet's scale, iMAML's proximal_lambda)."""
  from hypernet.tasks import meta_learning  # pylint: disable=g-import-not-at-top
  c = _meta_config(learner)
  inner_loop = learner not in ("protonet", "support_adapter")   # Those have none.
  if inner_loop:
    c.meta.update({"inner_lr": 0.25, "inner_steps": 2})
  if learner in ("maml", "fomaml", "imaml", "anil", "metasgd"):
    c.meta.zero_init = "head/*"
  if learner == "support_hypernet":
    c.meta.scale, c.meta.generator_widths = 3.0, (5,)
  if learner == "imaml":
    c.meta.proximal_lambda, c.meta.cg_steps = 0.5, 3
  if learner == "support_adapter":
    c.meta.update({"adapt": "conv2/kernel", "rank": 3, "adapter_scale": 0.5,
                   "generator_widths": (5,), "task_dim": 4, "train_base": False})
  config_lib.validate(c)
  cls = hn.meta.LEARNERS.get(learner)
  received = {}
  original = cls.__init__

  @functools.wraps(original)
  def spy(self, *args, **kwargs):
    received.update(kwargs)
    original(self, *args, **kwargs)

  monkeypatch.setattr(cls, "__init__", spy)
  c.model.conv_widths = (8, 8)
  target = meta_learning.make_meta_target(c, (8, 8, 1), 5)
  built = meta_learning.make_learner(c, target, "sparse_softmax_cross_entropy")
  assert type(built) is cls
  expected = {k: c.meta[k] for k in hn.meta.LEARNERS.config_fields(learner)}
  if "seed" in hn.meta.LEARNERS.fields(cls):
    expected["seed"] = c.seed
  assert {k: v for k, v in received.items() if k not in ("model", "loss_fn")} == expected
  if inner_loop:
    assert built.inner_lr == 0.25 and built.inner_steps == 2


@pytest.mark.parametrize("old, new", sorted(config_lib.RENAMED["meta"].items()))
def test_a_renamed_meta_field_names_the_constructors_name(old, new):
  """A config written with the old config.meta names is told the constructor's name."""
  c = _meta_config("maml")
  c.meta[old] = 1
  with pytest.raises(config_lib.ConfigError,
                     match=rf"^config\.meta\.{old} is not a known field\. Did you mean "
                           rf"config\.meta\.{new}\?") as e:
    config_lib.validate(c)
  assert "\n" not in str(e.value)


def test_another_learners_field_set_away_from_its_default_is_refused():
  c = _meta_config("maml")
  c.meta.proximal_lambda = 2.0
  with pytest.raises(config_lib.ConfigError,
                     match=r"^config\.meta\.proximal_lambda=2\.0 is not read by learner "
                           r"'maml' \(its fields: \[.*\]\); set it back to 1\.0\.$"):
    config_lib.validate(c)
  c.meta.learner = "imaml"
  config_lib.validate(c)


def test_the_command_line_and_an_old_workdirs_config_know_the_renamed_meta_fields():
  """A flag with a former config.meta name is told the new one; a workdir's config.json
  written before the rename is read under the new names (hypernet.evaluate, resuming)."""
  from hypernet.training import cli  # pylint: disable=g-import-not-at-top
  c = _meta_config("imaml")
  assert cli._field_error(c, "meta.imaml_lambda") == (  # pylint: disable=protected-access
      "config.meta has no field 'imaml_lambda'. Did you mean config.meta.proximal_lambda?")
  old = c.to_dict()
  meta = old["meta"]
  for new in ("proximal_lambda", "cg_steps", "head", "zero_init", "recompute", "scale",
              "gate"):
    del meta[new]
  meta.update(imaml_lambda=2.0, imaml_cg_steps=3, anil_head="head/*", zero_init_head=True,
              recompute_inner_steps=False, generator_scale=2.0, body_gate=0.5)
  back = config_lib.config_from_dict(old)
  assert (back.meta.proximal_lambda, back.meta.cg_steps, back.meta.zero_init,
          back.meta.gate) == (2.0, 3, "head/*", 0.5)
  meta["zero_init_head"] = False
  assert config_lib.config_from_dict(old).meta.zero_init == ""
