"""What the command-line entry points (``hypernet.train``, ``hypernet.evaluate``) share.

Nothing here imports TensorFlow at module level: :func:`quiet_startup` must run before
TensorFlow is imported so that its native start-up lines can be filtered.

* :func:`quiet_startup` -- TensorFlow's native start-up lines (the "All log messages
  before absl::InitializeLog()" banner, oneDNN / CPU-feature / CUDA-stub notices, the
  error-level ``failed call to cuInit`` of a machine without a GPU) and its Python INFO
  lines (``Sharding callback duration`` at every checkpoint) are dropped; the project's
  own log lines stay. ``--verbosity=N`` (absl's flag, also ``-v N``) keeps all of them.
* :func:`parse_flags` -- absl's flag parsing (``absl.app.run(main,
  flags_parser=parse_flags)``) with flagfiles and a repeated ``--config`` combined by
  absl's rule (the later value wins; every ``--config.FIELD=VALUE`` override applies, in
  order, to that config), and every parsing error (unknown flag or config field, missing
  config file, bad value) printed as one line that names it, exit status 1, before
  anything is created.
* :func:`run_main` -- runs an entry point's work: a user error (:func:`user_errors`) is
  one line and exit status 1; Ctrl-C ends with exit status 130 and no traceback.
* :func:`closing_summary` -- the block a training run ends with.
"""
from __future__ import annotations

import difflib
import importlib.util
import logging as py_logging
import os
import re
import sys
import tempfile
from typing import Callable, List, Mapping, Optional

from hypernet.training.console import format_metrics  # pylint: disable=unused-import

# A native log line: severity letter, MMDD, then time (absl / TensorFlow C++ format).
_NATIVE_LINE = re.compile(r"^[IWEF]\d{4} ")
_NATIVE_NOISE = (
    "All log messages before absl::InitializeLog()",
    "To enable the following instructions:",  # Continuation of cpu_feature_guard's line.
)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C'd command.


def verbose_requested(argv: List[str]) -> bool:
  """Whether the command line asks for absl's ``--verbosity`` / ``-v`` (all log lines)."""
  return any(a == "-v" or a.startswith(("--verbosity", "-v=", "--v=")) for a in argv[1:])


def quiet_startup(argv: List[str]) -> bool:
  """Imports TensorFlow and finds its devices with the native start-up lines filtered.

  Native (C++) log lines written while TensorFlow loads and looks for devices are
  captured from file descriptor 2; info and warning lines and, when no GPU was found,
  the CUDA initialisation error are dropped, anything else (real errors, Python output)
  is written back. Later native info/warning lines are switched off with
  ``TF_CPP_MIN_LOG_LEVEL=2`` (errors still show) unless the user set that variable.

  Args:
    argv: the command line (``sys.argv``); with ``--verbosity`` / ``-v`` nothing is
      filtered.

  Returns:
    ``True`` when the user asked for verbose output.
  """
  verbose = verbose_requested(argv)
  if verbose or "tensorflow" in sys.modules:
    return verbose
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    gpus = []
    try:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      gpus = tf.config.list_physical_devices("GPU")
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      text = captured.read().decode(errors="replace")
  kept = [line for line in text.splitlines()
          if not (_NATIVE_LINE.match(line) and (line[0] in "IW" or (
              not gpus and ("cuInit" in line or "cuda" in line.lower()))))
          and not any(noise in line for noise in _NATIVE_NOISE)]
  if kept:
    sys.stderr.write("\n".join(kept) + "\n")
  return verbose


class _ProjectInfoOnly(py_logging.Filter):
  """Passes warnings and errors, and INFO lines logged from the project's own files."""

  def __init__(self):
    super().__init__()
    package = os.path.dirname(os.path.abspath(__file__))
    self._roots = (package + os.sep,
                   os.path.join(os.path.dirname(package), "experiments") + os.sep)

  def filter(self, record: py_logging.LogRecord) -> bool:
    return record.levelno >= py_logging.WARNING or \
        os.path.abspath(record.pathname).startswith(self._roots)


def configure_logging(verbose: bool) -> None:
  """The project's INFO lines on; other libraries' INFO lines (TensorFlow logs
  ``Sharding callback duration`` through absl at every checkpoint) off unless
  ``verbose`` (then absl's ``--verbosity`` decides)."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  if not verbose:
    logging.set_verbosity(logging.INFO)
    logging.get_absl_handler().addFilter(_ProjectInfoOnly())
    for name in ("tensorflow", "keras", "h5py", "matplotlib", "PIL"):
      py_logging.getLogger(name).setLevel(py_logging.WARNING)


# -- flag parsing ------------------------------------------------------------------------
def _config_args(argv: List[str]) -> List[str]:
  """``argv`` with flagfiles expanded and only the last ``--config`` kept, placed first.

  ml_collections defines the ``--config.*`` override flags when it parses ``--config``,
  so a second ``--config`` (e.g. one in a flagfile and one on the command line) would
  define them twice. absl's rule for a repeated flag is that the later value wins; the
  overrides then all apply, in order, to that config.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  args = flags.FLAGS.read_flags_from_files(argv[1:], force_gnu=False)
  config, rest, i = None, [], 0
  while i < len(args):
    a = args[i]
    if a in ("--config", "-config") and i + 1 < len(args):
      config, i = args[i + 1], i + 2
      continue
    if a.startswith(("--config=", "-config=")):
      config = a.split("=", 1)[1]
    else:
      rest.append(a)
    i += 1
  return [argv[0]] + ([f"--config={config}"] if config is not None else []) + rest


def _load_config_file(path: str):
  spec = importlib.util.spec_from_file_location("hypernet_cli_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def _config_file_error(args: List[str], check_fields: bool = True) -> Optional[str]:
  """A one-line message when ``--config`` names no readable config file."""
  value = next((a.split("=", 1)[1] for a in args if a.startswith("--config=")), None)
  if value is None:
    return None
  path = value.split(":", 1)[0]  # ml_collections' "file.py:argument" form.
  if not os.path.isfile(path):
    folder = os.path.dirname(path) or "."
    names = sorted(f for f in os.listdir(folder) if f.endswith(".py")) \
        if os.path.isdir(folder) else []
    close = difflib.get_close_matches(os.path.basename(path), names, n=1)
    hint = (f" Did you mean {os.path.join(os.path.dirname(path), close[0])}?" if close
            else f" Config files in {folder}: {', '.join(names)}." if names else "")
    return f"--config={value}: no such file.{hint}"
  if not check_fields:
    return None
  try:
    config = _load_config_file(path)
  except Exception as e:  # pylint: disable=broad-except
    return f"--config={value}: loading it failed: {type(e).__name__}: {e}"
  for a in args:
    if a.startswith("--config.") and "=" in a:
      error = _field_error(config, a[len("--config."):].split("=", 1)[0])
      if error:
        return f"{a.split('=', 1)[0]}: {error}"
  return None


def _field_error(config, dotted: str) -> Optional[str]:
  """Why ``config.<dotted>`` is not a field, with the closest name; None if it is."""
  node, done = config, "config"
  for part in dotted.split("."):
    keys = list(node.keys()) if hasattr(node, "keys") else []
    if part not in keys:
      close = difflib.get_close_matches(part, keys, n=1)
      hint = f" Did you mean {done}.{close[0]}?" if close else \
          (f" Its fields: {', '.join(sorted(keys))}." if keys else "")
      what = f"{done} has no field {part!r}." if keys else f"{done} is not a group of fields."
      return what + hint
    node, done = node[part], f"{done}.{part}"
  return None


def _one_line(error: BaseException) -> str:
  text = str(error).strip()
  if isinstance(error, (AttributeError, KeyError)) and text[:1] in "'\"":
    text = text[1:-1].replace("\\n", "\n")  # The repr of a message (ml_collections).
  lines = [l.strip() for l in text.splitlines() if l.strip()]
  return " ".join(lines) if len(lines) <= 3 else lines[0] + " ... " + lines[-1]


def parse_flags(argv: List[str]) -> List[str]:
  """absl flag parsing for the entry points (``app.run(main, flags_parser=parse_flags)``).

  Returns:
    The remaining (positional) arguments, program name first.

  ``--help`` / ``--helpfull`` print the flags and exit 0. Exits with status 1 and one
  line on stderr (``<program>: <what is wrong>``) for an
  unknown flag or config field (with the closest name), a missing or broken config file,
  a bad flag value or a missing required flag.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  program = os.path.basename(argv[0]) if argv else "hypernet"
  if program in ("__main__.py", "-m", "-c"):
    program = "hypernet"
  try:
    args = _config_args(argv)
    message = _config_file_error(args, check_fields=False)
    if message:
      raise ValueError(message)
    rest = flags.FLAGS(args)
    if "config" in flags.FLAGS and flags.FLAGS["config"].value is not None:
      flags.FLAGS["config"].value.keys()  # ml_collections defers some errors to first use.
    return rest
  except SystemExit as e:
    # absl's --help / --helpfull print the usage and exit 1; asking for help succeeds.
    if any(a in ("-h", "-help", "--help", "--helpshort", "--helpfull", "-?")
           for a in argv[1:]):
      sys.exit(0)
    raise e
  except Exception as e:  # pylint: disable=broad-except
    message = None
    try:
      message = _config_file_error(_config_args(argv))
    except Exception:  # pylint: disable=broad-except
      pass
    sys.stderr.write(f"{program}: error: {message or _one_line(e)}\n")
    sys.exit(1)


# -- running an entry point --------------------------------------------------------------
def user_errors() -> tuple:
  """Errors whose message tells the user what to fix; entry points print them without a
  Python traceback (``--traceback`` shows it)."""
  from hypernet.training import checkpoints, config_lib, export, loop  # pylint: disable=g-import-not-at-top
  return (config_lib.ConfigError, FileNotFoundError, FileExistsError, NotADirectoryError,
          checkpoints.WorkdirInUseError, loop.NonFiniteLossError, loop.WorkdirWriteError,
          export.ExportPathError,
          export.ExportConditionError)


def run_main(fn: Callable[[], None], traceback: bool = False) -> None:
  """Calls ``fn()``: a :func:`user_errors` error is logged as one message and exits 1;
  Ctrl-C (``KeyboardInterrupt``, raised after the train loop saved its checkpoint and
  said so) exits with status 130 and no traceback."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  try:
    fn()
  except KeyboardInterrupt:
    if traceback:
      raise
    sys.stderr.flush()
    raise SystemExit(EXIT_INTERRUPTED) from None
  except user_errors() as e:  # pylint: disable=catching-non-exception
    if traceback:
      raise
    logging.error("%s: %s", type(e).__name__, e)
    # A checkpoint that did not fit: TensorFlow would list every unrestored value when the
    # failed restore is garbage collected at exit, after the one line that says it all.
    py_logging.getLogger("tensorflow").addFilter(_drop_unrestored_value_warnings)
    raise SystemExit(1) from None


def _drop_unrestored_value_warnings(record) -> bool:
  """A ``logging`` filter: False for TensorFlow's warnings about the values a failed
  checkpoint restore left unrestored."""
  return not record.getMessage().startswith((
      "Detecting that an object or model or tf.train.Checkpoint is being deleted with "
      "unrestored values", "Value in checkpoint could not be found"))


def check_workdir_is_folder(workdir: str, flag: str = "--workdir") -> None:
  """Raises NotADirectoryError naming ``flag`` when ``workdir`` exists and is a file."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise NotADirectoryError(f"{flag} must be a folder: {workdir} is a file.")


def latest_checkpoint_step(folder: str) -> Optional[int]:
  """The step of the checkpoint named by ``folder/checkpoint`` (CheckpointManager's
  state file), without importing TensorFlow."""
  try:
    with open(os.path.join(folder, "checkpoint")) as f:
      match = re.search(r'^model_checkpoint_path: ".*?ckpt-(\d+)"', f.read(), re.M)
  except OSError:
    return None
  return int(match.group(1)) if match else None


def closing_summary(result: Mapping, workdir: str) -> str:
  """The block a training run ends with: final test metrics (accuracy in %), steps, wall
  time, where the results are and the TensorBoard command.

  Args:
    result: ``loop.train_and_evaluate``'s return value (or ``final_metrics.json``).
    workdir: the run's folder.

  Returns:
    Five lines (six with skipped steps), e.g.::

      Done: 3000 steps in 15.7 s.
        test:        accuracy 97.77%, loss 0.08019
        metrics:     /tmp/hypernet/digits_hyper/final_metrics.json
        checkpoints: /tmp/hypernet/digits_hyper/checkpoints (latest: step 3000)
        TensorBoard: tensorboard --logdir /tmp/hypernet/digits_hyper
  """
  skip = ("step", "start_step", "wall_time_sec", "skipped_steps", "interrupted_by_signal")
  metrics = {k: v for k, v in result.items() if k not in skip and "/" not in k}
  checkpoints = os.path.join(workdir, "checkpoints")
  latest = latest_checkpoint_step(checkpoints)
  start = result.get("start_step") or 0
  ran = (f" in {result.get('wall_time_sec', 0):.1f} s" if not start else
         f" (resumed at step {start}: {result.get('step', start) - start} steps in "
         f"{result.get('wall_time_sec', 0):.1f} s)")
  lines = [
      f"Done: {result.get('step', '?')} steps{ran}.",
      "  test:        " + format_metrics(metrics),
      f"  metrics:     {os.path.join(workdir, 'final_metrics.json')}",
      f"  checkpoints: {checkpoints}" + (f" (latest: step {latest})" if latest is not None
                                         else ""),
      f"  TensorBoard: tensorboard --logdir {workdir}",
  ]
  if result.get("skipped_steps"):
    lines.insert(2, f"  skipped non-finite steps: {result['skipped_steps']}")
  return "\n".join(lines)
