"""The command line as a new user meets it: one-line errors that create nothing, flagfiles,
the closing summary, a finished rerun that rewrites nothing, quiet output, Ctrl-C."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

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


@pytest.mark.parametrize("flag, message", [
    ("--config.hypernet.chunk_size=0", "ConfigError: config.hypernet.chunk_size must be "
                                       "positive"),
    ("--config.hypernet.kind=static", "set config.hypernet.targets to conv kernels, e.g. "
                                      "'conv*/kernel'"),
])
def test_config_errors_are_one_line_exit_1_and_create_nothing(tmp_path, flag, message):
  workdir = tmp_path / "run"
  out = _run("hypernet.train", "--config=configs/digits_hyper.py", f"--workdir={workdir}", flag)
  assert out.returncode == 1 and "Traceback" not in out.stderr
  assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr
  assert not workdir.exists()


def test_workdir_that_is_a_file_and_export_into_a_missing_folder_fail_first(tmp_path):
  a_file = tmp_path / "notes.txt"
  a_file.write_text("not a folder")
  out = _run("hypernet.train", "--config=configs/digits_hyper.py", f"--workdir={a_file}")
  assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
  assert out.stderr.strip().endswith(f"NotADirectoryError: --workdir must be a folder: "
                                     f"{a_file} is a file.")
  assert a_file.read_text() == "not a folder"
  # Checked before the workdir is even read (this one has no config.json either).
  missing = tmp_path / "no_such_folder" / "target.keras"
  out = _run("hypernet.evaluate", f"--workdir={tmp_path}", f"--export={missing}")
  assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
  assert f"--export={missing}: the folder {missing.parent} does not exist" in out.stderr
  assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


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
                         f"  TensorBoard: tensorboard --logdir {workdir}"]
  # Only the project's own lines on stderr: no TensorFlow start-up banner, no cuInit
  # error, no "Sharding callback duration".
  for noise in ("absl::InitializeLog", "cuInit", "cuda", "oneDNN", "Sharding callback",
                "cpu_feature_guard"):
    assert noise not in first.stderr, noise
  assert all(line.startswith(("I", "W")) and ".py:" in line.split("]")[0]
             for line in first.stderr.strip().splitlines()), first.stderr

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
    if "step 20/100000" in line:
      break
  proc.send_signal(signal.SIGINT)
  stdout, rest = proc.communicate(timeout=120)
  stderr = "".join(lines) + rest
  assert proc.returncode == 130, stderr[-3000:]
  assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
  stopped = [l for l in stderr.splitlines() if "Stopped by SIGINT at step" in l]
  assert len(stopped) == 1 and "Rerun the same command to resume." in stopped[0]
  step = int(stopped[0].split("at step ")[1].split(";")[0])
  assert step >= 20 and os.path.exists(workdir / "checkpoints" / f"ckpt-{step}.index")
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
  assert cli.closing_summary(result, "/tmp/run").splitlines()[0] == "Done: 3000 steps in 7.9 s."


def test_a_user_error_exits_1_and_silences_tensorflows_unrestored_value_list():
  """After the one-line error for a checkpoint that does not fit, TensorFlow's warnings
  about the failed restore's unrestored values (at exit) are dropped; others are kept."""
  import logging  # pylint: disable=g-import-not-at-top
  from hypernet.training import config_lib  # pylint: disable=g-import-not-at-top

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
