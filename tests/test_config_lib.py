"""Config validation fails before any training work and names the field."""
import glob
import json
import os
import re
import sys

from absl import flags
import ml_collections
from ml_collections import config_flags
import pytest

from hypernet import config_lib


from hypernet.training import loop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "configs"))
import digits_hyper  # noqa: E402  pylint: disable=g-import-not-at-top


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "configs", "*.py"))))
def test_every_config_file_validates(path):
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("cfg", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config_lib.validate(module.get_config())


def _fails_before_training(config, tmp_path, match):
  workdir = tmp_path / "run"
  with pytest.raises(config_lib.ConfigError, match=match):
    loop.train_and_evaluate(config, str(workdir))
  assert not workdir.exists()  # Nothing built, nothing written.


def test_unknown_field_is_named_with_the_closest_known_one(tmp_path):
  c = digits_hyper.get_config()
  c.optim.lrr = 3e-4  # A typo in a config file: ConfigDict accepts new fields.
  _fails_before_training(c, tmp_path, r"config\.optim\.lrr is not a known field\. Did you "
                                      r"mean config\.optim\.lr\?")


def test_wrong_type_is_named(tmp_path):
  c = digits_hyper.get_config()
  with c.ignore_type():
    c.num_steps = "3000"
  _fails_before_training(c, tmp_path, r"config\.num_steps='3000' has type str; it must be int")
  c = digits_hyper.get_config()
  with c.ignore_type():
    c.hypernet.train_rest = 1
  with pytest.raises(config_lib.ConfigError, match=r"config\.hypernet\.train_rest=1 .* bool"):
    config_lib.validate(c)


def test_accepted_conversions():
  c = digits_hyper.get_config()
  c.optim.lr = 1  # int for a float field
  c.model.conv_widths = [8, 16]  # list for a tuple field
  with c.ignore_type():
    c.jit_compile = True  # bool also allowed for this string field
  config_lib.validate(c)


def test_none_field_is_named(tmp_path):
  c = digits_hyper.get_config()
  c.optim.lr = None  # ConfigDict lets any field become None.
  _fails_before_training(c, tmp_path, r"config\.optim\.lr is None; it needs a value of type "
                                      r"float")


def test_placeholder_field_keeps_its_type(monkeypatch):
  """A None default must be a typed placeholder: unset is fine, a wrong type is not."""
  base = config_lib.base_config

  def with_placeholder():
    c = base()
    c.data.max_examples = ml_collections.config_dict.placeholder(int)
    return c

  monkeypatch.setattr(config_lib, "base_config", with_placeholder)
  c = with_placeholder()
  config_lib.validate(c)
  c.data.max_examples = 100
  config_lib.validate(c)
  with c.ignore_type():
    c.data.max_examples = "all"
  with pytest.raises(config_lib.ConfigError, match=r"config\.data\.max_examples='all' .* int"):
    config_lib.validate(c)


def test_missing_field_is_named():
  c = digits_hyper.get_config()
  del c.summaries["every"]
  with pytest.raises(config_lib.ConfigError, match=r"config\.summaries\.every is missing"):
    config_lib.validate(c)


def test_pattern_matching_no_weight_is_named(tmp_path):
  c = digits_hyper.get_config()
  c.hypernet.targets = "conv*/kernel,conv3/*"  # The CNN has conv1 and conv2 only.
  _fails_before_training(c, tmp_path, r"config\.hypernet\.targets=.*the pattern 'conv3/\*' "
                                      r"matches no trainable weight .*'conv1/kernel'")


@pytest.mark.parametrize("field,value,match", [
    ("summaries.profile_steps", 50, r"config\.summaries\.profile_start=2990 \+ profile_steps=50 "
                                    r"runs past config\.num_steps=3000"),
    ("fault.nonfinite", "ignore", r"config\.fault\.nonfinite='ignore'; use one of"),
    ("eval_every", -1, r"config\.eval_every must be an integer >= 0"),
    ("batch_size", 0, r"config\.batch_size must be a positive integer"),
    ("hypernet.targets", " ", r"config\.hypernet\.targets is empty"),
])
def test_impossible_values_are_named(field, value, match):
  c = digits_hyper.get_config()
  c.num_steps, c.summaries.profile_start = 3000, 2990
  node = c
  *parents, leaf = field.split(".")
  for p in parents:
    node = node[p]
  node[leaf] = value
  with pytest.raises(config_lib.ConfigError, match=match):
    config_lib.validate(c)


def test_command_line_errors_name_the_field(monkeypatch):
  """The command line (ml_collections config_flags, as hypernet.train defines it) refuses
  unknown fields and bad types while parsing flags."""
  def parse(*args):
    argv = ["train", f"--config={REPO}/configs/digits_hyper.py", *args]
    monkeypatch.setattr(sys, "argv", argv)  # config_flags reads the overrides from it.
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, flag_values=fv, lock_config=True)
    fv(argv)
    return fv.config

  assert parse("--config.optim.lr=0.01").optim.lr == 0.01
  with pytest.raises(Exception, match="lrr"):
    parse("--config.optim.lrr=0.01")
  with pytest.raises(flags.Error, match=r"config\.num_steps|num_steps"):
    parse("--config.num_steps=abc")


def test_config_round_trips_through_the_workdir_json():
  c = digits_hyper.get_config()
  restored = config_lib.config_from_dict(json.loads(c.to_json_best_effort()))
  assert restored == c and config_lib.flatten(restored) == config_lib.flatten(c)
  assert restored.model.conv_widths == (32, 64)
  flat = config_lib.flatten(c)
  assert flat["optim.lr"] == 5e-3 and flat["hypernet.kind"] == "chunked"
  assert len(flat) == sum(1 for _ in config_lib.flatten(config_lib.base_config()))


def test_choices_agree_with_the_modules_that_use_them():
  from hypernet.training import distribute
  from hypernet.hypernetworks import base
  from hypernet.meta import meta_batch
  assert config_lib.CHOICES["meta.parallel"] == meta_batch.STRATEGIES
  from hypernet import meta, tasks
  from hypernet.tasks import meta_learning
  assert config_lib.CHOICES["meta.learner"] == meta.LEARNERS.names()
  assert config_lib.CHOICES["task"] == tasks.TASKS.names()
  assert config_lib.CHOICES["meta.bn_mode"] == meta_learning.BN_MODES
  assert config_lib.CHOICES["hypernet.kind"] == ("none",) + base.KINDS.names()
  assert config_lib.CHOICES["meta.body_hypernet"] == ("none",) + base.KINDS.names()
  assert config_lib.CHOICES["hypernet.activation"] == base.ACTIVATIONS
  assert config_lib.CHOICES["distribution"] == distribute.KINDS
  assert config_lib.CHOICES["dtype_policy"] == distribute.DTYPE_POLICIES
  from hypernet.tasks import continual_learning
  assert config_lib.CHOICES["continual.method"] == continual_learning.METHODS
  assert config_lib.CHOICES["continual.benchmark"] == continual_learning.BENCHMARKS
  assert config_lib.CHOICES["continual.task_inference"] == continual_learning.TASK_INFERENCE
  from hypernet.numerics import accel
  assert config_lib.CHOICES["accelerate"] == tuple(accel.CONFIG_VALUES)


@pytest.mark.parametrize("field,value", [("optim.name", "adm"), ("hypernet.kind", "chunkd"),
                                         ("distribution", "mirored"), ("meta.learner", "mam")])
def test_unknown_choice_fails_before_any_work_naming_the_field(tmp_path, field, value):
  from hypernet.training import loop
  c = config_lib.base_config()
  c.update_from_flattened_dict({field: value})
  with pytest.raises(config_lib.ConfigError, match=rf"config\.{field}='{value}' is not one of"):
    loop.train_and_evaluate(c, str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


def _load(name):
  return config_lib.load_config_file(os.path.join(REPO, "configs", f"{name}.py"))


def _set(config, field, value):
  node = config
  *parents, leaf = field.split(".")
  for p in parents:
    node = node[p]
  with config.ignore_type():
    node[leaf] = value


_NAN, _INF = float("nan"), float("inf")


@pytest.mark.parametrize("name,field,value", [
    ("digits_hyper", "optim.lr", -1.0),
    ("digits_hyper", "optim.lr", 0.0),
    ("digits_hyper", "optim.lr", _NAN),
    ("digits_hyper", "optim.lr", _INF),
    ("digits_hyper", "optim.warmup_steps", -500),
    ("digits_hyper", "optim.grad_clip_norm", -1.0),
    ("digits_hyper", "optim.grad_clip_norm", _NAN),
    ("digits_hyper", "optim.weight_decay", -0.1),
    ("digits_hyper", "seed", -1),
    ("digits_hyper", "seed", 2 ** 32),
    ("digits_hyper", "data.augment_shift", -1),
    ("digits_hyper", "data.augment_rotation", 180.0),
    ("omniglot_support_hypernet", "data.augment_rotation", -1.0),
    ("omniglot_support_hypernet", "data.augment_rotation", 180.0),
    ("omniglot_support_hypernet", "data.augment_scale", 1.0),
    ("omniglot_support_hypernet", "data.augment_shear", _NAN),
    ("sinusoid_maml", "data.augment_scale", 0.1),
    ("digits_hyper", "model.dropout", 1.5),
    ("digits_hyper", "model.dropout", 1.0),
    ("digits_hyper", "model.dropout", -0.1),
    ("digits_hyper", "model.conv_widths", (32, 0)),
    ("digits_hyper", "model.name", "conv4"),
    ("omniglot_maml", "meta.num_ways", 0),
    ("omniglot_maml", "meta.num_shots", 0),
    ("omniglot_maml", "meta.inner_steps", 0),
    ("omniglot_maml", "meta.inner_lr", -0.4),
    ("omniglot_maml", "meta.inner_lr", _NAN),
    ("omniglot_maml", "meta.eval_inner_steps", -1),
    ("omniglot_maml", "meta.num_queries", 20),
    ("omniglot_maml", "data.num_test_characters", 0),
    ("omniglot_support_hypernet", "meta.inner_steps", -1),
    ("omniglot_support_hypernet", "meta.train_ways", -1),
    ("omniglot_maml", "meta.train_ways", 20),          # Its head is adapted, not generated.
    ("omniglot_support_hypernet", "meta.train_before_metrics", True),  # No 'before' head.
    ("sinusoid_maml", "meta.num_shots", 0),
    ("split_fmnist_hnet", "continual.num_tasks", 0),
    ("split_fmnist_hnet", "continual.steps_per_task", 0),
    ("split_fmnist_hnet", "num_steps", 5001),
])
def test_out_of_range_values_are_named_before_any_work(name, field, value):
  c = _load(name)
  _set(c, field, value)
  # The field is named; meta.num_queries is named with num_shots (Omniglot's 20 drawings).
  named = "num_shots" if field == "meta.num_queries" else field.split(".")[-1]
  named = rf"{named}=\(\) .* hidden layer" if value == () else named
  with pytest.raises(config_lib.ConfigError, match=rf"config\.(\w+\.)?{named}"):
    config_lib.validate(c)


@pytest.mark.parametrize("name,field,value", [
    ("digits_hyper", "hypernet.chunk_size", 0),
    ("digits_hyper", "hypernet.chunk_size", -3),
    ("digits_hyper", "hypernet.chunk_emb_dim", 0),
    ("digits_hyper", "hypernet.hidden", (0,)),
    ("digits_hyper", "hypernet.emb_multiplier", 0.0),
    ("digits_hyper", "hypernet.head_multiplier", -1.0),
    ("digits_mlp", "hypernet.embedding_dim", 0),
    ("digits_static", "hypernet.z_dim", 0),
    ("digits_static", "hypernet.slice_out", 0),
    ("digits_conditional", "hypernet.num_conditions", -1),
    ("digits_conditional", "hypernet.hidden", ()),    # A linear generator, conditioned.
])
def test_a_kinds_out_of_range_field_is_named_by_its_constructor(name, field, value):
  """A kind's own ranges live in its constructor (one place); building the weight source
  from the config names the field of config.hypernet (the argument's own name)."""
  from hypernet.hypernetworks import source  # pylint: disable=g-import-not-at-top
  from hypernet.tasks import targets  # pylint: disable=g-import-not-at-top
  c = _load(name)
  _set(c, field, value)
  config_lib.validate(c)
  target = targets.make_target(c.model, (8, 8, 1), 10)
  named = field.split(".")[-1]
  with pytest.raises(ValueError, match=rf"^config\.hypernet \(kind '\w+'\): .*{named}"):
    source.build_weight_source(c, target)


@pytest.mark.parametrize("name,field,value", [
    ("digits_hyper", "hypernet.hidden", ()),          # A linear generator.
    ("digits_hyper", "optim.grad_clip_norm", 0.0),     # 0: no clipping.
    ("digits_hyper", "model.dropout", 0.0),
    ("fmnist_conditional", "hypernet.embedding_dim", 0),  # The condition is the input.
    ("omniglot_support_hypernet", "meta.inner_steps", 0),  # Generated head, no inner loop.
    ("split_fmnist_hnet", "num_steps", 100),           # Stops inside task 0 (a warning).
    ("sinusoid_maml", "meta.num_ways", 0),             # Sinusoids have no classes.
    ("omniglot_support_hypernet", "data.augment_shear", 0.3),  # Koch et al.'s sizes.
    ("omniglot_support_hypernet", "data.augment_rotation", 10.0),
    ("digits_hyper", "data.augment_rotation", 10.0),   # Classification images too.
    ("split_mnist_hnet", "data.augment_scale", 0.1),
])
def test_edge_values_that_are_valid(name, field, value):
  c = _load(name)
  _set(c, field, value)
  config_lib.validate(c)


@pytest.mark.parametrize("old,new", [
    ("chunk_emb_multiplier", "emb_multiplier"), ("chunk_center", "center"),
    ("chunk_head_precondition", "head_precondition"), ("static_hidden_dim", "hidden_dim"),
    ("slice_channels", "slice_in"), ("chunk_condition_per_chunk", "condition_per_chunk")])
def test_a_renamed_hypernet_field_names_the_constructors_name(old, new):
  """config.hypernet's fields are the kinds' constructor arguments by their own names; a
  config written with the old prefixed names is told the new one."""
  c = _load("digits_hyper")
  c.hypernet[old] = 1
  with pytest.raises(config_lib.ConfigError,
                     match=rf"^config\.hypernet\.{old} is not a known field\. Did you mean "
                           rf"config\.hypernet\.{new}\?"):
    config_lib.validate(c)


def test_continual_num_steps_past_the_sequence_names_both_fields():
  c = _load("split_fmnist_hnet")
  c.num_steps = 6000
  with pytest.raises(config_lib.ConfigError, match=r"config\.num_steps=6000 .*config\."
                     r"continual\.num_tasks \* steps_per_task = 5 \* 1000 = 5000.*"
                     r"--config\.num_steps=5000"):
    config_lib.validate(c)


@pytest.mark.parametrize("field,value,match", [
    # The static kind generates square conv kernels only.
    ("hypernet.kind", "static", r"config\.hypernet\.targets=.* \(config\.hypernet\.kind="
                                r"'static'\): .* square conv kernels .* 'conv1/bias' has shape "
                                r"\(32,\)\. Select conv kernels only, e\.g\. 'conv\*/kernel'"),
    # The sinusoid target (an MLP) has no conv layers.
    ("task", "sinusoid", r"config\.hypernet\.targets=.*the pattern 'conv\*/\*' matches no "
                         r"trainable weight of the target network 'mlp'"),
])
def test_patterns_the_target_cannot_take_fail_before_the_workdir(tmp_path, field, value, match):
  c = digits_hyper.get_config()
  _set(c, field, value)
  _fails_before_training(c, tmp_path, match)


def _omniglot_config(data_dir, **meta):
  c = _load("omniglot_maml")
  c.data.data_dir = str(data_dir / "omniglot")
  c.data.omniglot_zips = "images_background_small1.zip,images_background_small2.zip"
  c.data.num_test_characters = 50
  for k, v in meta.items():
    _set(c, k, v)
  return c


def test_omniglot_without_a_data_folder_fails_before_the_workdir(tmp_path):
  _fails_before_training(_load("omniglot_maml"), tmp_path,
                         r"config\.data\.data_dir is empty: set it to the folder")


LEAK = ("config.meta.one_shot_runs='all_runs.zip' scores Lake et al.'s runs, whose "
        "characters come from the evaluation alphabets, but config.data.omniglot_zips reads "
        "images_evaluation.zip for meta-training: a leak of the test characters; meta-train "
        "on config.data.omniglot_zips='images_background.zip' only "
        "(configs/omniglot_lake_support_hypernet.py) or set one_shot_runs=''.")


@pytest.mark.parametrize("name,zips", [
    ("omniglot_lake_support_hypernet", "images_background.zip,images_evaluation.zip"),
    ("omniglot_20way_support_hypernet", "images_background_small1.zip, images_evaluation.zip"),
    ("omniglot_20way", "images_evaluation.zip"),
])
def test_one_shot_runs_with_the_evaluation_alphabets_in_meta_training_are_refused(
    tmp_path, name, zips):
  """Lake et al.'s runs are drawn from images_evaluation.zip's alphabets: a run that
  meta-trains on it and scores the runs is refused before anything is built (issue 40);
  the committed configs (background zips only) and the standard split (no runs) pass."""
  c = _load(name)
  config_lib.validate(c)
  c.data.omniglot_zips = zips
  _fails_before_training(c, tmp_path, "^" + re.escape(LEAK) + "$")
  from hypernet.tasks import meta_learning  # pylint: disable=g-import-not-at-top
  with pytest.raises(config_lib.ConfigError, match="^" + re.escape(LEAK) + "$"):
    meta_learning.MetaLearningTask(c)   # Built without validate(): refused before loading.
  c.meta.one_shot_runs = ""   # No runs: no leak (episodes on held-out characters).
  c.data.num_test_characters = max(c.data.num_test_characters, 20)
  config_lib.validate(c)
  config_lib.validate(_load("omniglot_standard_support_hypernet"))


def test_no_held_out_characters_needs_the_one_shot_runs(tmp_path):
  """data.num_test_characters=0 (every character meta-trained, Lake et al.'s protocol)
  evaluates on the one-shot runs alone; without them there is nothing to evaluate."""
  c = _load("omniglot_lake_support_hypernet")
  assert c.data.num_test_characters == 0
  config_lib.validate(c)
  c.meta.one_shot_runs = ""
  _fails_before_training(c, tmp_path, r"^config\.data\.num_test_characters=0 holds out no "
                                      r"characters, so there is nothing to evaluate on")
  c.data.num_test_characters = -3
  _fails_before_training(c, tmp_path, r"num_test_characters must be >= 1 \(0: none held "
                                      r"out, with config\.meta\.one_shot_runs\), got -3")


@pytest.mark.parametrize("overrides,match", [
    ({"meta.num_ways": 5000}, r"config\.meta\.num_ways=5000 exceeds the 768 meta-train "
                              r"classes"),
    ({"data.num_test_characters": 500}, r"config\.data\.num_test_characters=500 leaves no "
                                        r".* 242 characters; pick 1\.\.241"),
    ({"meta.one_shot_runs": "all_runs.zip"}, r"config\.meta\.one_shot_runs: .* need "
                                             r"num_ways=20"),
])
def test_omniglot_checks_that_need_the_data_leave_no_workdir(data_dir, tmp_path, overrides,
                                                             match):
  """Raised while building (the class counts come from the zips), in the locked workdir:
  the workdir the run created is removed again."""
  _fails_before_training(_omniglot_config(data_dir, **overrides), tmp_path, match)


def test_a_failure_while_building_leaves_no_folder_it_created(data_dir, tmp_path):
  """Also for an error raised while building that is not a ConfigError, and for the
  missing parents of a nested --workdir; a parent that existed is kept."""
  c = _omniglot_config(data_dir, **{"data.num_test_characters": 5000})
  workdir = tmp_path / "a" / "b" / "run"
  with pytest.raises(config_lib.ConfigError, match="num_test_characters=5000"):
    loop.train_and_evaluate(c, str(workdir))
  assert not (tmp_path / "a").exists() and tmp_path.exists()
  def fail(*args, **kwargs):
    raise ValueError("some other error while building")

  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(loop.Trainer, "__init__", fail)
    with pytest.raises(ValueError, match="some other error"):
      loop.train_and_evaluate(digits_hyper.get_config(), str(workdir))
  assert not (tmp_path / "a").exists()
  (tmp_path / "mine").mkdir()  # A folder that existed before the run is kept.
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(loop.Trainer, "__init__", fail)
    with pytest.raises(ValueError, match="some other error"):
      loop.train_and_evaluate(digits_hyper.get_config(), str(tmp_path / "mine"))
  assert (tmp_path / "mine").is_dir()


def test_an_existing_workdir_is_kept_on_a_config_error(data_dir, tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "notes.txt").write_text("mine")
  with pytest.raises(config_lib.ConfigError, match=r"num_ways=5000"):
    loop.train_and_evaluate(_omniglot_config(data_dir, **{"meta.num_ways": 5000}),
                                 str(workdir))
  assert sorted(os.listdir(workdir)) == ["lock", "notes.txt"]


def test_config_files_named_in_messages_exist():
  """Every ``configs/NAME.py`` that a message (or docstring) under hypernet/ names is a
  real file."""
  import re  # pylint: disable=g-import-not-at-top
  named = set()
  for path in glob.glob(os.path.join(REPO, "hypernet", "**", "*.py"), recursive=True):
    with open(path) as f:
      named.update((os.path.relpath(path, REPO), m)
                   for m in re.findall(r"configs/[a-z0-9_]+\.py", f.read()))
  assert named
  missing = sorted((src, m) for src, m in named if not os.path.exists(os.path.join(REPO, m)))
  assert not missing, f"messages name config files that do not exist: {missing}"


def test_used_fields_are_the_fields_the_run_reads():
  """TensorBoard's Text config: the hyperparameters plus the execution fields the run
  applies, not other tasks', models' or hypernetwork kinds' fields."""
  import sys  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))), "configs"))
  import digits_hyper, omniglot_maml  # pylint: disable=g-import-not-at-top,multiple-imports
  digits = config_lib.used_fields(digits_hyper.get_config())
  assert set(config_lib.hparams(digits_hyper.get_config())) < set(digits)
  assert {"log_every", "eval_every", "checkpoint_every", "summaries.every",
          "summaries.kernel_images", "fault.nonfinite"} <= set(digits)
  assert digits["model.conv_widths"] == (32, 64) and digits["eval_every"] == 200
  assert not [k for k in digits if k.startswith(("meta.", "continual.", "multitask."))]
  assert not {"data.data_dir", "data.omniglot_zips", "summaries.profile_start",
              "fault.max_skips", "hypernet.z_dim", "model.alpha"} & set(digits)
  meta = config_lib.used_fields(omniglot_maml.get_config())
  assert {"data.data_dir", "meta.parallel", "meta.inner_lr", "data.omniglot_zips"} <= set(meta)
  assert not {"hypernet.chunk_size", "data.test_fraction"} & set(meta)


@pytest.mark.parametrize("learner, fix", [("maml", "learner='fomaml'"),
                                          ("anil", "learner 'fomaml'")])
def test_first_order_on_a_learner_that_ignores_it_is_refused(learner, fix):
  """``meta.first_order`` is read by the support-conditioned hypernetwork only: on MAML it
  used to train second order without a word."""
  c = config_lib.load_config_file(os.path.join(os.path.dirname(__file__), "..", "configs",
                                               "omniglot_maml.py"))
  c.meta.learner = learner
  c.meta.first_order = True
  with pytest.raises(config_lib.ConfigError,
                     match=rf"config\.meta\.first_order=True .*{learner!r}.*{fix}"):
    config_lib.validate(c)
  c.meta.learner = "support_hypernet"
  config_lib.validate(c)


def test_a_workdir_config_older_than_new_fields_reads_with_their_defaults(tmp_path, capsys):
  """``hypernet.evaluate`` / resuming a workdir written before fields existed: the missing
  fields take their defaults (the old behaviour) and the note names them; an unknown
  field is still refused."""
  from hypernet.training import cli
  c = digits_hyper.get_config()
  values = json.loads(c.to_json_best_effort())
  del values["meta"]["bn_mode"], values["meta"]["lslr"], values["optim"]["schedule"]
  filled = []
  restored = config_lib.config_from_dict(values, filled)
  assert restored == c
  assert sorted(filled) == ["meta.bn_mode", "meta.lslr", "optim.schedule"]
  del values["summaries"]
  (tmp_path / "config.json").write_text(json.dumps(values))
  assert cli.read_workdir_config(str(tmp_path)) == c
  err = capsys.readouterr().err
  assert err.startswith(f"note: {tmp_path / 'config.json'} predates ") and \
      "meta.bn_mode, meta.lslr" in err and "more); they take their defaults" in err
  values["meta"]["not_a_field"] = 1
  with pytest.raises(config_lib.ConfigError, match=r"config\.meta\.not_a_field"):
    config_lib.config_from_dict(values)


def test_an_old_workdirs_hypernet_fields_are_read_under_their_new_names():
  """A run written before the hypernetwork fields took their constructors' names resumes
  and evaluates with the same values (config.json holds the former names)."""
  old = config_lib.base_config().to_dict()
  hyper = old["hypernet"]
  for new in ("center", "emb_multiplier", "head_precondition", "condition_per_chunk",
              "hidden_dim", "slice_in", "slice_out"):
    hyper.pop(new)
  hyper.update(chunk_center=False, chunk_emb_multiplier=3.0, chunk_head_precondition=0.5,
               chunk_condition_per_chunk=True, static_hidden_dim=7, slice_channels=[8, 4])
  filled = []
  c = config_lib.config_from_dict(old, filled)
  config_lib.validate(c)
  h = c.hypernet
  assert (h.center, h.emb_multiplier, h.head_precondition, h.condition_per_chunk,
          h.hidden_dim, h.slice_in, h.slice_out) == (False, 3.0, 0.5, True, 7, 8, 4)
  assert not [f for f in filled if f.startswith("hypernet.")], filled


def _committed(name):
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("cfg", os.path.join(REPO, "configs",
                                                                     f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def test_unread_fields_names_the_field_and_what_decides_it():
  """What a run does not read, with the field that decides it; what it reads, nothing.
  ``meta.eval_queries`` sizes the sinusoid run's test tasks (it is read there too)."""
  c = _committed("digits_hyper")
  c.optim.weight_decay = 1e-4
  assert config_lib.unread_fields(c, ["optim.weight_decay", "optim.lr", "accelerate"]) == [
      "--config.optim.weight_decay=0.0001 is not read by this run (config.optim.name="
      "'adam'), so it changes nothing."]
  c.optim.name = "adamw"
  assert config_lib.unread_fields(c, ["optim.weight_decay", "optim.decay_rate"]) == [
      "--config.optim.decay_rate=0.5 is not read by this run (config.optim.schedule="
      f"{c.optim.schedule!r}), so it changes nothing."]
  assert config_lib.unread_fields(_committed("sinusoid_maml"), ["meta.eval_queries"]) == []
  finetune = _committed("permuted_mnist_finetune")
  digits = _committed("digits_hyper")
  assert config_lib.unread_fields(finetune, ["continual.beta", "accelerate",
                                             "continual.ewc_lambda", "model.dropout"]) + \
      config_lib.unread_fields(digits, ["continual.beta"]) == [
      "--config.continual.beta=0.1 is not read by this run (config.continual.method="
      "'finetune'), so it changes nothing.",
      "--config.accelerate='default' is not read by this run (config.task='continual'), so "
      "it changes nothing.",
      "--config.continual.ewc_lambda=100.0 is not read by this run (config.continual."
      "method='finetune'), so it changes nothing.",
      "--config.continual.beta=0.01 is not read by this run (config.task='classification'), "
      "so it changes nothing."]


def _documented_train_commands():
  """``(where, config name, [(field, value text)])`` for every ``python -m hypernet.train
  --config=configs/NAME.py ... --config.X=V`` in the README, docs/, experiments/ and the
  configs' docstrings (backslash continuations joined)."""
  paths = ([os.path.join(REPO, "README.md")] + glob.glob(os.path.join(REPO, "docs", "*.md"))
           + glob.glob(os.path.join(REPO, "experiments", "**", "*.md"), recursive=True)
           + glob.glob(os.path.join(REPO, "configs", "*.py")))
  for path in paths:
    with open(path, encoding="utf-8") as f:
      text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
      name = re.search(r"--config=configs/(\w+)\.py", line)
      sets = re.findall(r"--config\.([\w.]+)=(\"[^\"]*\"|'[^']*'|[^\s`]+)", line)
      if name and sets and name.group(1) != "NAME":
        yield os.path.relpath(path, REPO), name.group(1), sets


def _parsed(text):
  import ast  # pylint: disable=g-import-not-at-top
  for candidate in (text, text.rstrip("];,.)`"), text.rstrip("];,.`")):
    candidate = candidate.strip("\"'")
    try:
      return ast.literal_eval(candidate)
    except (ValueError, SyntaxError):
      continue
  return text.strip("\"'")


def test_every_documented_train_command_reads_the_fields_it_sets():
  """No command beside a documented result sets a field its run does not read (the
  command would then not be what produced the number), and the fields table that
  decides the console's notices agrees with how the documented runs are made."""
  checked, unread = 0, []
  for where, name, sets in _documented_train_commands():
    c = _committed(name)
    for field, text in sets:    # Placeholders (SEED, LR, ...) keep the config's value.
      try:
        c.update_from_flattened_dict({field: _parsed(text)})
      except (TypeError, ValueError, KeyError):
        pass
    checked += 1
    unread += [f"{where} ({name}): {line}"
               for line in config_lib.unread_fields(c, [f for f, _ in sets])]
  assert checked > 100 and not unread, "\n".join(unread)
