"""The command line as a new user meets it: one-line errors that create nothing, flagfiles,
the closing summary, a finished rerun that rewrites nothing, quiet output, Ctrl-C."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from hypernet import config_lib


from hypernet.training import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args, timeout=300):
  return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True,
                        text=True, timeout=timeout)


@pytest.mark.parametrize("flag, message", [
    ("--config.optim.lrr=1",
     "--config.optim.lrr: config.optim has no field 'lrr'. Did you mean config.optim.lr?"),
    ("--config.num_step=5",
     "--config.num_step: config has no field 'num_step'. Did you mean config.num_steps?"),
    ("--config.optim.lr=abc",
     "flag --config.optim.lr=abc: could not convert string to float: 'abc'"),
    ("--config=configs/digits_hyperr.py",
     "--config=configs/digits_hyperr.py: no such file. Did you mean configs/digits_hyper.py?"),
    ("--no_such_flag=1", "Unknown command line flag 'no_such_flag'"),
])
def test_flag_errors_are_one_line_naming_the_flag_and_create_nothing(tmp_path, flag, message):
  workdir = tmp_path / "run"
  out = _run("hypernet.train", "--config=configs/digits_hyper.py", f"--workdir={workdir}", flag)
  assert out.returncode == 1
  assert out.stderr == f"train.py: error: {message}\n" and out.stdout == ""
  assert not workdir.exists()


def test_a_user_error_after_the_tensorflow_import_reads_like_a_flag_error(tmp_path):
  """A check that needs the built target network (TensorFlow): the same one-line form as
  flag errors, no log prefix, no exception class."""
  workdir = tmp_path / "run"
  out = _run("hypernet.train", "--config=configs/digits_hyper.py", f"--workdir={workdir}",
             "--config.hypernet.kind=static")
  assert out.returncode == 1 and "Traceback" not in out.stderr
  last = out.stderr.strip().splitlines()[-1]
  assert last.startswith("train.py: error: config.hypernet.targets=") and \
      "Select conv kernels only, e.g. 'conv*/kernel'" in last
  assert "ConfigError" not in out.stderr
  assert not workdir.exists()


def _run_without_tensorflow(*args, timeout=120):
  """``python -m <args>`` in a process where importing TensorFlow or Keras fails: a
  command that reaches the import ends in an ImportError traceback."""
  code = ("import runpy, sys\n"
          "sys.modules['tensorflow'] = sys.modules['keras'] = None\n"
          f"sys.argv = {list(args)!r}\n"
          "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n")
  return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                        text=True, timeout=timeout)


def _no_tensorflow_cases(tmp_path):
  a_file = tmp_path / "notes.txt"
  a_file.write_text("not a folder")
  empty = tmp_path / "empty"
  empty.mkdir()
  trained = tmp_path / "trained"  # config.json and a checkpoint state file, no ckpt-7.
  (trained / "checkpoints").mkdir(parents=True)
  (trained / "config.json").write_text(
      config_lib.load_config_file(os.path.join(REPO, "configs", "digits_hyper.py"))
      .to_json_best_effort())
  (trained / "checkpoints" / "checkpoint").write_text(
      'model_checkpoint_path: "ckpt-5"\nall_model_checkpoint_paths: "ckpt-5"\n')
  (trained / "checkpoints" / "ckpt-5.index").write_text("")
  missing = tmp_path / "no_such_folder" / "target.keras"
  train = ("hypernet.train", "--config=configs/digits_hyper.py")
  return [
      (train + (f"--workdir={tmp_path / 'run'}", "--config.num_steps=0"),
       "train.py: error: config.num_steps must be a positive integer, got 0."),
      (train + (f"--workdir={a_file}",),
       f"train.py: error: --workdir must be a folder: {a_file} is a file."),
      (("hypernet.train", "--config=configs/fashion_mnist_hyper.py",
        f"--workdir={tmp_path / 'run'}", f"--config.data.data_dir={empty}"),
       f"train.py: error: fashion_mnist: IDX files not found in ['{empty}']"),
      (("hypernet.evaluate", f"--workdir={empty}"),
       f"evaluate.py: error: --workdir={empty} holds no config.json: it must be a folder "
       "written by python -m hypernet.train."),
      (("hypernet.evaluate", f"--workdir={tmp_path / 'nothing'}"),
       f"evaluate.py: error: --workdir={tmp_path / 'nothing'} does not exist: it must be a "
       "folder written by python -m hypernet.train."),
      (("hypernet.evaluate", f"--workdir={a_file}"),
       f"evaluate.py: error: --workdir must be a folder: {a_file} is a file."),
      # The export folder is checked before the workdir is even read.
      (("hypernet.evaluate", f"--workdir={empty}", f"--export={missing}"),
       f"evaluate.py: error: --export={missing}: the folder {missing.parent} does not "
       "exist; create it first or export elsewhere."),
      (("hypernet.evaluate", f"--workdir={trained}", f"--export={tmp_path / 'm.h5'}"),
       f"evaluate.py: error: Export path '{tmp_path / 'm.h5'}' must end in '.keras' (the "
       "Keras 3 format)."),
      # Lake et al.'s runs scored by a run meta-trained on their alphabets (issue 40).
      (("hypernet.train", "--config=configs/omniglot_lake_support_hypernet.py",
        f"--workdir={tmp_path / 'run'}",
        "--config.data.omniglot_zips=images_background.zip,images_evaluation.zip"),
       "train.py: error: config.meta.one_shot_runs='all_runs.zip' scores Lake et al.'s runs, "
       "whose characters come from the evaluation alphabets, but config.data.omniglot_zips "
       "reads images_evaluation.zip for meta-training: a leak of the test characters; "
       "meta-train on config.data.omniglot_zips='images_background.zip' only "
       "(configs/omniglot_lake_support_hypernet.py) or set one_shot_runs=''."),
      (("hypernet.evaluate", f"--workdir={trained}", "--checkpoint=7"),
       f"evaluate.py: error: --checkpoint=7: {trained}/checkpoints/ckpt-7 does not exist; "
       f"the steps saved in {trained}/checkpoints: [5]."),
  ]


def test_user_errors_that_need_no_tensorflow_are_reported_before_importing_it(tmp_path):
  """num_steps=0, a workdir that is a file, missing data files, evaluate on an empty or
  missing folder, a missing checkpoint, export into a missing folder: one line
  ``<program>: error: ...``, exit status 1, in a process that cannot import TensorFlow,
  and nothing created."""
  for args, message in _no_tensorflow_cases(tmp_path):
    before = sorted(os.listdir(tmp_path))
    out = _run_without_tensorflow(*args)
    assert out.returncode == 1, (args, out.stderr[-2000:])
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith(message), \
        (args, out.stderr[-2000:])
    assert out.stdout == "" and sorted(os.listdir(tmp_path)) == before


def test_the_first_line_comes_before_the_tensorflow_import(tmp_path):
  """A short time stamp, no absl prefix; then the import (here it fails: TensorFlow is
  blocked, which shows the line came first)."""
  out = _run_without_tensorflow("hypernet.train", "--config=configs/digits_hyper.py",
                                f"--workdir={tmp_path / 'run'}")
  first = out.stderr.splitlines()[0]
  assert re.fullmatch(r"\d\d:\d\d:\d\d Training configs/digits_hyper\.py for 10000 steps in "
                      + re.escape(str(tmp_path / "run")) + r" \(loading TensorFlow\) \.\.\.",
                      first), out.stderr[-2000:]
  assert "halted; None in sys.modules" in out.stderr and out.returncode == 1
  assert not (tmp_path / "run").exists()


def test_an_override_the_run_does_not_read_is_named_before_the_tensorflow_import(tmp_path):
  """``--config.optim.weight_decay`` under Adam and a ``meta.*`` field in a classification
  run change nothing: each gets one warning line naming the field and what decides it,
  before TensorFlow loads; the fields the run reads get none."""
  out = _run_without_tensorflow(
      "hypernet.train", "--config=configs/digits_hyper.py", f"--workdir={tmp_path / 'run'}",
      "--config.optim.weight_decay=1e-4", "--config.meta.inner_lr=0.1",
      "--config.optim.lr=3e-3", "--config.num_steps=50")
  lines = out.stderr.splitlines()
  assert re.fullmatch(r"\d\d:\d\d:\d\d warning: --config\.optim\.weight_decay=0\.0001 is not "
                      r"read by this run \(config\.optim\.name='adam'\), so it changes "
                      r"nothing\.", lines[1]), out.stderr[-2000:]
  assert re.fullmatch(r"\d\d:\d\d:\d\d warning: --config\.meta\.inner_lr=0\.1 is not read by "
                      r"this run \(config\.task='classification'\), so it changes "
                      r"nothing\.", lines[2]), out.stderr[-2000:]
  assert "optim.lr" not in out.stderr and "num_steps=50 is not" not in out.stderr
  assert "halted; None in sys.modules" in out.stderr   # ... and then the import


@pytest.mark.parametrize("flag, message", [
    ("--num_steps=5", "Unknown flag --num_steps=5; did you mean --config.num_steps=5?"),
    ("--lr=0.1", "Unknown flag --lr=0.1; did you mean --config.optim.lr=0.1?"),
    ("--optim.lr=0.1", "Unknown flag --optim.lr=0.1; did you mean --config.optim.lr=0.1?"),
    ("--chunk_size=64", "Unknown flag --chunk_size=64; did you mean "
                        "--config.hypernet.chunk_size=64?"),
    ("--name=adamw", "Unknown flag --name=adamw; did you mean --config.data.name=adamw, "
                     "--config.model.name=adamw or --config.optim.name=adamw?"),
    ("--config.lr=0.1", "--config.lr: config has no field 'lr'. Did you mean "
                        "config.optim.lr?"),
    ("--config.hypernet.lr=0.1", "--config.hypernet.lr: config.hypernet has no field 'lr'. "
                                 "Its fields:"),
    ("--workdirr=x", "Unknown command line flag 'workdirr'. Did you mean: workdir ?"),
])
def test_a_config_field_without_config_gets_the_flag_to_use(tmp_path, flag, message):
  out = _run_without_tensorflow("hypernet.train", "--config=configs/digits_hyper.py",
                                f"--workdir={tmp_path / 'run'}", flag)
  assert out.returncode == 1
  assert out.stderr.startswith(f"train.py: error: {message}") and \
      len(out.stderr.splitlines()) == 1, out.stderr[-2000:]
  assert not (tmp_path / "run").exists()


def test_ctrl_c_during_start_up_is_one_line_and_exit_130(tmp_path):
  """Ctrl-C while TensorFlow loads: exit status 130, one line, no traceback, nothing
  created."""
  workdir = tmp_path / "run"
  proc = subprocess.Popen(
      [sys.executable, "-m", "hypernet.train", "--config=configs/digits_hyper.py",
       f"--workdir={workdir}"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  first = proc.stderr.readline()
  assert "(loading TensorFlow) ..." in first, first
  time.sleep(0.5)  # Inside the TensorFlow import (seconds long).
  proc.send_signal(signal.SIGINT)
  stdout, rest = proc.communicate(timeout=120)
  assert proc.returncode == 130, rest[-3000:]
  assert rest == ("train.py: stopped by Ctrl-C before a checkpoint was saved; rerun the "
                  "same command to start again.\n"), rest[-3000:]
  assert stdout == "" and not workdir.exists()


def test_flagfile_and_command_line_combine_and_a_finished_rerun_prints_its_summary(tmp_path):
  """absl's rule: the later flag wins. The flagfile's --config is followed by the command
  line's, whose config is used; the flagfile's field overrides apply to it."""
  flagfile = tmp_path / "flags.txt"
  flagfile.write_text("--config=configs/digits_hyper.py\n--config.num_steps=7\n"
                      "--config.log_every=7\n")
  workdir = tmp_path / "run"
  command = ["hypernet.train", f"--flagfile={flagfile}", "--config=configs/digits_plain.py",
             f"--workdir={workdir}", "--config.checkpoint_every=7", "--config.eval_every=7"]
  first = _run(*command)
  assert first.returncode == 0, first.stderr[-3000:]
  with open(workdir / "config.json") as f:
    config = json.load(f)
  assert config["hypernet"]["kind"] == "none" and config["num_steps"] == 7  # digits_plain
  assert config["log_every"] == config["checkpoint_every"] == 7
  with open(workdir / "final_metrics.json") as f:
    saved = f.read()
  metrics = json.loads(saved)
  summary = first.stdout.strip().splitlines()
  assert summary[0] == f"Done: 7 steps in {metrics['wall_time_sec']:.1f} s."
  assert summary[1] == (f"  test:        accuracy {100 * metrics['accuracy']:.2f}%, "
                        f"loss {metrics['loss']:.4g}")
  assert summary[2:] == [f"  metrics:     {workdir}/final_metrics.json",
                         f"  checkpoints: {workdir}/checkpoints (latest: step 7)",
                         f"  export:      python -m hypernet.evaluate --workdir={workdir} "
                         f"--export={workdir}/target.keras",
                         f"  TensorBoard: tensorboard --logdir {workdir}"]
  # Only the project's own lines on stderr: no TensorFlow start-up banner, no cuInit
  # error, no "Sharding callback duration".
  for noise in ("absl::InitializeLog", "cuInit", "cuda", "oneDNN", "Sharding callback",
                "cpu_feature_guard"):
    assert noise not in first.stderr, noise
  # A short time stamp, not absl's 56-character prefix; a line before the TensorFlow
  # import, one before the tracing and one after it, then the progress.
  lines = first.stderr.strip().splitlines()
  assert all(re.match(r"\d\d:\d\d:\d\d \S", line) for line in lines), first.stderr
  messages = [line[9:] for line in lines]
  assert messages[0] == (f"Training configs/digits_plain.py for 7 steps in {workdir} "
                         "(loading TensorFlow) ...")
  assert re.fullmatch(r"Loaded TensorFlow in \d+\.\d s; loading the data and building the "
                      r"model \.\.\.", messages[1]), messages
  assert messages[2].startswith("Parameters: ")
  assert messages[3:5] == ["Compiling the summaries and evaluating step 0 ...",
                           "Compiling the train step ..."]
  assert re.fullmatch(r"Compiled in \d+\.\d s; training \(a line every 7 steps\) \.\.\.",
                      messages[5])
  assert re.fullmatch(r"step 7/7  loss \S+  accuracy \S+  \| eval accuracy \S+%, loss \S+ \|"
                      r"  [\d.]+ steps/s  ETA 0s", messages[6]), messages
  # Two evaluations (steps 0 and 7): TensorBoard's default smoothing cannot draw the last
  # one right, and the run says so.
  assert messages[7].startswith("warning: TensorBoard's default smoothing (0.6) draws the "
                                "last eval accuracy as "), messages
  assert len(messages) == 8, messages

  again = _run(*command)
  assert again.returncode == 0, again.stderr[-3000:]
  assert again.stdout == first.stdout  # The same summary, from the saved metrics.
  with open(workdir / "final_metrics.json") as f:
    assert f.read() == saved  # Not rewritten (wall_time_sec kept).


def test_ctrl_c_saves_says_so_and_exits_130_without_a_traceback(tmp_path):
  workdir = tmp_path / "run"
  proc = subprocess.Popen(
      [sys.executable, "-m", "hypernet.train", "--config=configs/digits_plain.py",
       f"--workdir={workdir}", "--config.num_steps=100000", "--config.log_every=10",
       "--config.checkpoint_every=100000", "--config.eval_every=0",
       "--config.summaries.every=0"],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  lines = []
  deadline = time.time() + 240
  while time.time() < deadline:
    line = proc.stderr.readline()
    lines.append(line)
    if "Compiled in" in line or not line:
      break
  time.sleep(1.0)  # Training now (the console shows a line every 10,000 steps).
  proc.send_signal(signal.SIGINT)
  stdout, rest = proc.communicate(timeout=120)
  stderr = "".join(lines) + rest
  assert proc.returncode == 130, stderr[-3000:]
  assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
  assert "stopped by Ctrl-C" not in stderr  # The loop said what it saved: nothing more.
  stopped = [l for l in stderr.splitlines() if "Stopped by SIGINT at step" in l]
  assert len(stopped) == 1 and "Rerun the same command to resume." in stopped[0]
  step = int(stopped[0].split("at step ")[1].split(";")[0])
  assert step >= 1 and os.path.exists(workdir / "checkpoints" / f"ckpt-{step}.index")
  assert stdout == ""  # No summary for an unfinished run.


def test_closing_summary_counts_a_resumed_process_and_shows_fractions_in_percent():
  """A resumed run's time is its own process's, said so; accuracies, error rates and their
  CI95 half-widths are fractions shown in percent."""
  result = {"accuracy": 0.322, "accuracy_ci95": 0.04198, "one_shot_error": 0.675,
            "loss": 1.5, "step": 3000, "start_step": 1500, "wall_time_sec": 7.92}
  summary = cli.closing_summary(result, "/tmp/run").splitlines()
  assert summary[0] == "Done: 3000 steps (resumed at step 1500: 1500 steps in 7.9 s)."
  assert summary[1] == ("  test:        accuracy 32.20%, accuracy_ci95 4.20%, "
                        "one_shot_error 67.50%, loss 1.5")
  result.update(start_step=0)
  summary = cli.closing_summary(result, "/tmp/my run").splitlines()
  assert summary[0] == "Done: 3000 steps in 7.9 s."
  # The next commands, ready to paste (a path with a space is quoted).
  assert summary[-2:] == [
      "  export:      python -m hypernet.evaluate --workdir='/tmp/my run' "
      "--export='/tmp/my run/target.keras'",
      "  TensorBoard: tensorboard --logdir '/tmp/my run'"]
  # A run with no single target network (support-conditioned hypernetwork): evaluate it.
  assert cli.closing_summary(result, "/tmp/run", exportable=False).splitlines()[-2] == \
      "  evaluate:    python -m hypernet.evaluate --workdir=/tmp/run"


def test_a_user_error_exits_1_and_silences_tensorflows_unrestored_value_list():
  """After the one-line error for a checkpoint that does not fit, TensorFlow's warnings
  about the failed restore's unrestored values (at exit) are dropped; others are kept."""
  import logging  # pylint: disable=g-import-not-at-top
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top

  def fail():
    raise config_lib.ConfigError("The checkpoint does not fit this config.")

  with pytest.raises(SystemExit) as exit_info:
    cli.run_main(fail)
  assert exit_info.value.code == 1
  tf_logger = logging.getLogger("tensorflow")
  try:
    def record(message):
      return logging.LogRecord("tensorflow", logging.WARNING, "checkpoint.py", 1, message,
                               None, None)
    assert not tf_logger.filter(record("Value in checkpoint could not be found in the "
                                       "restored object: (root).save_counter"))
    assert tf_logger.filter(record("Another warning"))
  finally:
    tf_logger.removeFilter(cli._drop_unrestored_value_warnings)  # pylint: disable=protected-access


# -- --config looked up among the installed configs (pip install, any directory) ---------
def test_a_config_missing_here_is_found_among_hypernets_configs(tmp_path, monkeypatch):
  """``configs/NAME.py``, ``NAME.py`` and ``NAME`` name a committed config from any
  directory (ml_collections' ``:argument`` kept); a file in the working directory wins;
  absolute paths and other folders are the user's own and stay as given."""
  monkeypatch.chdir(tmp_path)
  committed = os.path.join(REPO, "configs", "digits_hyper.py")
  for value in ("configs/digits_hyper.py", "./configs/digits_hyper.py", "digits_hyper.py",
                "digits_hyper"):
    assert os.path.samefile(cli.find_config(value), committed), value
  assert cli.find_config("digits_hyper:arg").endswith(os.path.join("configs",
                                                                   "digits_hyper.py:arg"))
  for value in ("mine/digits_hyper.py", "/nowhere/digits_hyper.py", "configs/nope.py"):
    assert cli.find_config(value) == value
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "digits_hyper.py").write_text("")
  assert cli.find_config("configs/digits_hyper.py") == "configs/digits_hyper.py"
  args = cli._config_args(["train", "--config=digits_plain", "--workdir=w"])  # pylint: disable=protected-access
  assert os.path.samefile(args[1].split("=", 1)[1], os.path.join(REPO, "configs",
                                                                 "digits_plain.py"))


def test_a_config_found_nowhere_says_where_it_looked_and_what_is_there(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "script.py").write_text("")  # The working directory's own code: no config.
  folder = cli.config_folders()[0]
  error = cli._config_file_error  # pylint: disable=protected-access
  assert error(["train", "--config=configs/digits_hyperr.py"]) == (
      f"--config=configs/digits_hyperr.py: no such file, nor digits_hyperr.py in {folder} "
      "(hypernet's configs). Did you mean configs/digits_hyper.py?")
  assert error(["train", "--config=digits_hyperr"]).endswith(" Did you mean digits_hyper?")
  listed = error(["train", "--config=zzzz.py"])
  assert listed.startswith(f"--config=zzzz.py: no such file, nor zzzz.py in {folder} "
                           "(hypernet's configs: digits_conditional, digits_hyper, ")
  assert "script" not in listed and listed.endswith(", split_mnist_lora_independent).")
  assert error(["train", "--config=mine/x.py"]) == "--config=mine/x.py: no such file."


def test_installed_configs_are_the_packages_own_then_the_checkouts(tmp_path, monkeypatch):
  """A wheel's ``site-packages/hypernet/configs``; a top-level ``configs`` beside it
  (another distribution's) is not hypernet's: only a source checkout's is."""
  site = tmp_path / "site-packages"
  (site / "hypernet" / "configs").mkdir(parents=True)
  (site / "configs").mkdir()
  monkeypatch.setattr(cli, "__file__", str(site / "hypernet" / "training" / "cli.py"))
  assert cli.config_folders() == [str(site / "hypernet" / "configs")]
  (site / "pyproject.toml").write_text("")
  assert cli.config_folders() == [str(site / "hypernet" / "configs"), str(site / "configs")]


def test_train_finds_the_config_from_another_directory_and_reports_its_version(tmp_path):
  """The README's ``--config=configs/digits_hyper.py`` run elsewhere: found and loaded
  (here stopped by a config error before TensorFlow loads); ``--version``."""
  env = dict(os.environ, PYTHONPATH=REPO)
  out = subprocess.run([sys.executable, "-m", "hypernet.train",
                        "--config=configs/digits_hyper.py", f"--workdir={tmp_path / 'run'}",
                        "--config.num_steps=0"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
  assert out.returncode == 1 and out.stderr.startswith("train.py: error: config.num_steps"), \
      out.stderr[-2000:]
  import hypernet  # pylint: disable=g-import-not-at-top
  for module in ("hypernet.train", "hypernet.evaluate"):
    out = subprocess.run([sys.executable, "-m", module, "--version"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout) == (0, f"hypernet {hypernet.__version__}\n"), out


def test_frozen_imports_leave_later_garbage_collected():
  """cli.freeze_imported_objects (called by hypernet.train and hypernet.evaluate after
  TensorFlow's import): what was alive is frozen, a cycle made afterwards is still freed."""
  import gc  # pylint: disable=g-import-not-at-top
  import weakref  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top,unused-import
  saved = gc.get_threshold()
  try:
    frozen = cli.freeze_imported_objects(young_generation=5_000)
    assert frozen == gc.get_freeze_count() > 100_000  # TensorFlow's and Keras' objects
    assert gc.isenabled() and gc.get_threshold() == (5_000, 10, 10)

    class Node:
      pass
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    alive = weakref.ref(a)
    del a, b
    assert alive() is not None
    gc.collect()
    assert alive() is None
  finally:  # This process runs other tests: what was frozen here is collectable again.
    gc.unfreeze()
    gc.set_threshold(*saved)
