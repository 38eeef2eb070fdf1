"""What the command-line entry points (``hypernet.train``, ``hypernet.evaluate``) share:
quiet TensorFlow start-up, absl flag parsing with one-line errors, the checks that need
no TensorFlow, running an entry point with short log lines and exit statuses (1 user
error, 130 Ctrl-C), and the closing summary. Nothing here imports TensorFlow at module
level.
"""
from __future__ import annotations

import difflib
import gc
import importlib.util
import logging as py_logging
import os
import re
import sys
import tempfile
import time
from typing import Callable, List, Mapping, Optional

from hypernet.training.console import format_metrics  # pylint: disable=unused-import
from hypernet.training.workdir import Workdir

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


def freeze_imported_objects(young_generation: int = 10_000) -> int:
  """Takes the objects alive now (TensorFlow's, Keras', hypernet's modules) out of
  Python's cyclic garbage collection, and lets the young generation grow to
  ``young_generation`` objects (Python's default: 700) before a collection.

  Call it once, after the imports and before tracing; ``hypernet.train`` and
  ``hypernet.evaluate`` do. TensorFlow and Keras leave over 10^5 long-lived objects that
  every full collection walks again, and tracing a graph allocates enough objects to start
  collections every few graphs: README's main job for 300 steps takes 0.86x the wall time
  and 0.87x the CPU with it (docs/performance.md, "Set-up"). Frozen objects are never
  freed (modules, classes and their caches, which live as long as the process); garbage
  made later is collected as before, only less often. A library call does not do this:
  the process is the application's. Uses the public ``gc.freeze`` (Python >= 3.7) and
  ``gc.set_threshold``.

  Args:
    young_generation: allocations (minus deallocations) between two collections of the
      youngest generation; the older generations keep Python's ratios (10, 10).

  Returns:
    The number of objects frozen (``gc.get_freeze_count()``).
  """
  gc.collect()
  gc.freeze()
  gc.set_threshold(young_generation, 10, 10)
  return gc.get_freeze_count()


class _ProjectInfoOnly(py_logging.Filter):
  """Passes warnings and errors, and INFO lines logged from the project's own files."""

  def __init__(self):
    super().__init__()
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hypernet/
    self._roots = (package + os.sep,
                   os.path.join(os.path.dirname(package), "experiments") + os.sep)

  def filter(self, record: py_logging.LogRecord) -> bool:
    return record.levelno >= py_logging.WARNING or \
        os.path.abspath(record.pathname).startswith(self._roots)


class ShortFormatter(py_logging.Formatter):
  """``12:04:31 step 300/3000 ...``: a log line with a short time stamp instead of absl's
  56-character prefix (severity, date, microseconds, thread id, file:line); warnings and
  errors say so (``12:04:31 warning: ...``)."""

  def format(self, record: py_logging.LogRecord) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
    level = "" if record.levelno < py_logging.WARNING else \
        ("warning: " if record.levelno < py_logging.ERROR else "error: ")
    return f"{stamp} {level}{record.getMessage()}"


def configure_logging(verbose: bool) -> None:
  """The project's INFO lines on, each with a short time stamp (:class:`ShortFormatter`);
  other libraries' INFO lines (TensorFlow logs ``Sharding callback duration`` through
  absl at every checkpoint) off. With ``verbose`` absl's own format and ``--verbosity``
  decide. TensorFlow-free: call it before the TensorFlow import."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  if not verbose:
    logging.set_verbosity(logging.INFO)
    handler = logging.get_absl_handler()
    handler.addFilter(_ProjectInfoOnly())
    handler.setFormatter(ShortFormatter())
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
  if config is not None:
    config = find_config(config)
  return [argv[0]] + ([f"--config={config}"] if config is not None else []) + rest


def config_folders() -> List[str]:
  """The folders of committed configs, where ``--config=configs/NAME.py`` is looked up when
  the working directory holds no such file (:func:`find_config`).

  The configs installed with the package (``hypernet/configs/``: a wheel ships the
  repository's ``configs/`` there), then ``configs/`` beside the package when the package
  is a source checkout (an editable install, ``PYTHONPATH``); the folders that exist.
  """
  package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hypernet/
  checkout = os.path.dirname(package)
  folders = [os.path.join(package, "configs")]
  if os.path.isfile(os.path.join(checkout, "pyproject.toml")):
    folders.append(os.path.join(checkout, "configs"))
  out: List[str] = []
  for folder in folders:
    if os.path.isdir(folder) and \
        os.path.realpath(folder) not in [os.path.realpath(f) for f in out]:
      out.append(folder)
  return out


def _lookup_name(path: str) -> Optional[str]:
  """``NAME.py`` when ``path`` may name a committed config (``configs/NAME.py``,
  ``NAME.py`` or ``NAME``, relative); ``None`` for any other path."""
  if os.path.isabs(path) or not path:
    return None
  folder, name = os.path.split(os.path.normpath(path))
  if folder not in ("", "configs") or name in (".", ".."):
    return None
  return name if name.endswith(".py") else name + ".py"


def _other_folders(path: str) -> List[str]:
  """:func:`config_folders` other than the one ``path`` itself is in."""
  here = os.path.realpath(os.path.dirname(path) or ".")
  return [f for f in config_folders() if os.path.realpath(f) != here]


def find_config(value: str) -> str:
  """The ``--config`` value with its file found.

  ``value`` is ``PATH`` or ml_collections' ``PATH:ARGUMENT``. A ``PATH`` that is a file
  (relative to the working directory) is kept. Otherwise ``configs/NAME.py``, ``NAME.py``
  or ``NAME`` is looked up in :func:`config_folders`, so that the README's
  ``--config=configs/digits_hyper.py`` also works after ``pip install`` from any
  directory; the first match's full path replaces ``PATH`` (``:ARGUMENT`` kept). Anything
  else, or no match, is returned unchanged (the flag parser then reports it:
  :func:`_config_file_error`).
  """
  path, sep, argument = value.partition(":")
  name = _lookup_name(path)
  if os.path.isfile(path) or name is None:
    return value
  for folder in _other_folders(path):
    candidate = os.path.join(folder, name)
    if os.path.isfile(candidate):
      return candidate + sep + argument
  return value


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
    return f"--config={value}: {_no_config_file(path)}"
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


def _no_config_file(path: str) -> str:
  """"no such file" for a ``--config`` path, saying where it was looked for
  (:func:`find_config`) and naming the closest config or, failing one, the configs."""
  folder = os.path.dirname(path) or "."
  name = _lookup_name(path)
  others = _other_folders(path) if name is not None else []
  # The working directory's own .py files are no configs unless it was named as a folder.
  local = sorted(f for f in os.listdir(folder) if f.endswith(".py")) \
      if os.path.isdir(folder) and (os.path.dirname(path) or not others) else []
  installed: List[str] = []
  for other in others:
    installed += [f for f in sorted(os.listdir(other)) if f.endswith(".py")
                  and f not in installed]
  names = local + [f for f in installed if f not in local]
  typed = os.path.basename(path)
  bare = name is not None and not typed.endswith(".py")  # --config=NAME
  close = difflib.get_close_matches(typed + ".py" if bare else typed, names, n=1)
  where = f"Config files in {folder}: {', '.join(local)}." if local else ""
  if others:
    listed = "" if close else ": " + ", ".join(f[:-3] for f in installed)
    where = f", nor {name} in {_either(others)} (hypernet's configs{listed})."
  elif where:
    where = ". " + where if not close else "."
  else:
    where = "."
  hint = ""
  if close:
    shown = close[0][:-3] if bare else close[0]
    hint = f" Did you mean {os.path.join(os.path.dirname(path), shown)}?"
  return f"no such file{where}{hint}"


def _field_error(config, dotted: str) -> Optional[str]:
  """Why ``config.<dotted>`` is not a field, with the closest name; None if it is."""
  node, done = config, "config"
  for part in dotted.split("."):
    keys = list(node.keys()) if hasattr(node, "keys") else []
    if part not in keys:
      nested = [f"{done}.{path}" for path in _leaf_paths(node) if path.endswith("." + part)]
      from hypernet import config_lib  # pylint: disable=g-import-not-at-top
      renamed = config_lib.RENAMED.get(done[len("config."):], {}).get(part)
      close = [renamed] if renamed else difflib.get_close_matches(part, keys, n=1)
      hint = (f" Did you mean {_either(nested)}?" if nested and not renamed else
              f" Did you mean {done}.{close[0]}?" if close else
              f" Its fields: {', '.join(sorted(keys))}." if keys else "")
      what = f"{done} has no field {part!r}." if keys else f"{done} is not a group of fields."
      return what + hint
    node, done = node[part], f"{done}.{part}"
  return None


def _leaf_paths(node, prefix: str = "") -> List[str]:
  """Dotted paths of the leaf fields under a config (``["optim.lr", ...]``)."""
  out = []
  for key in (node.keys() if hasattr(node, "keys") else ()):
    if hasattr(node[key], "keys"):
      out += _leaf_paths(node[key], f"{prefix}{key}.")
    else:
      out.append(f"{prefix}{key}")
  return out


def _either(options: List[str]) -> str:
  return options[0] if len(options) == 1 else \
      ", ".join(options[:-1]) + " or " + options[-1]


def unknown_flag_hint(name: str, argv: List[str]) -> Optional[str]:
  """The message for an unknown flag ``--<name>`` that is a config field written without
  ``config.``: ``--num_steps=5`` -> ``Unknown flag --num_steps=5; did you mean
  --config.num_steps=5?``, ``--lr`` -> ``--config.optim.lr`` (the schema's leaf fields by
  full dotted path or by last name, then the closest last name). ``None`` when no field
  is close."""
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  paths = _leaf_paths(config_lib.base_config())
  matches = [p for p in paths if p == name] or \
      [p for p in paths if p.rsplit(".", 1)[-1] == name]
  if not matches:
    close = difflib.get_close_matches(name, [p.rsplit(".", 1)[-1] for p in paths], n=1,
                                      cutoff=0.8)
    matches = [p for p in paths if close and p.rsplit(".", 1)[-1] == close[0]]
  if not matches:
    return None
  typed = next((a.lstrip("-") for a in argv[1:]
                if a.lstrip("-").split("=", 1)[0] == name), name)
  value = typed[len(name):]  # "=5" or "".
  return (f"Unknown flag --{typed}; did you mean "
          f"{_either([f'--config.{m}{value}' for m in matches])}?")


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

  ``--help`` / ``--helpfull`` print the flags and ``--version`` hypernet's version, and
  exit 0. ``--config=configs/NAME.py`` not found in the working directory is looked up
  among the installed configs (:func:`find_config`). Exits with status 1 and one
  line on stderr (``<program>: <what is wrong>``) for an
  unknown flag or config field (with the closest name), a missing or broken config file,
  a bad flag value or a missing required flag.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  program = os.path.basename(argv[0]) if argv else "hypernet"
  if program in ("__main__.py", "-m", "-c"):
    program = "hypernet"
  if "--version" in argv[1:]:
    from hypernet import __version__  # pylint: disable=g-import-not-at-top
    print(f"hypernet {__version__}")
    sys.exit(0)
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
      if message is None and isinstance(e, flags.UnrecognizedFlagError) and \
          "config" in flags.FLAGS:
        message = unknown_flag_hint(e.flagname, argv)
    except Exception:  # pylint: disable=broad-except
      pass
    sys.stderr.write(f"{program}: error: {message or _one_line(e)}\n")
    sys.exit(1)


# -- running an entry point --------------------------------------------------------------
def program_name(argv: Optional[List[str]] = None) -> str:
  """The name user errors start with: ``train.py`` for ``python -m hypernet.train``."""
  argv = sys.argv if argv is None else argv
  program = os.path.basename(argv[0]) if argv else "hypernet"
  return "hypernet" if program in ("__main__.py", "-m", "-c", "") else program


def user_errors() -> tuple:
  """Errors whose message tells the user what to fix; entry points print them as one line
  without a Python traceback (``--traceback`` shows it). TensorFlow-free: the errors of
  modules that import TensorFlow are included once they are loaded."""
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  from hypernet.core import plugins  # pylint: disable=g-import-not-at-top
  from hypernet.training import export  # pylint: disable=g-import-not-at-top
  errors = [config_lib.ConfigError, plugins.PluginError, FileNotFoundError, FileExistsError, NotADirectoryError,
            export.ExportPathError, export.ExportConditionError, export.NotExportableError]
  for module, name in (("hypernet.training.checkpoints", "WorkdirInUseError"),
                       ("hypernet.training.loop", "NonFiniteLossError"),
                       ("hypernet.training.loop", "WorkdirWriteError")):
    if module in sys.modules:
      errors.append(getattr(sys.modules[module], name))
  return tuple(errors)


def fail(message: str, program: Optional[str] = None) -> None:
  """Prints ``<program>: error: <message>`` (one line, as flag errors are) and exits 1."""
  sys.stdout.flush()
  sys.stderr.write(f"{program or program_name()}: error: {message}\n")
  sys.stderr.flush()
  raise SystemExit(1)


def _stop_was_reported() -> bool:
  """Whether the train loop saved a checkpoint and said so before re-raising Ctrl-C."""
  checkpoints = sys.modules.get("hypernet.training.checkpoints")
  return bool(checkpoints is not None and checkpoints.exited_by_signal())


def run_main(fn: Callable[[], None], traceback: bool = False,
             interrupted: str = "stopped by Ctrl-C.") -> None:
  """Runs an entry point's work ``fn()`` with the console set up (:func:`configure_logging`).

  * a :func:`user_errors` error: one line ``<program>: error: <message>`` (the form of
    flag errors, no exception class), exit status 1;
  * Ctrl-C: exit status 130 and no traceback; after the train loop saved a checkpoint
    and said so, nothing more, otherwise (start-up, TensorFlow import, evaluation) the
    one line ``<program>: <interrupted>``.
  """
  configure_logging(verbose_requested(sys.argv))
  try:
    fn()
  except KeyboardInterrupt:
    if traceback:
      raise
    if not _stop_was_reported():
      sys.stderr.write(f"{program_name()}: {interrupted}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_INTERRUPTED) from None
  except Exception as e:  # pylint: disable=broad-except
    if traceback or not isinstance(e, user_errors()):
      raise
    # A checkpoint that did not fit: TensorFlow would list every unrestored value when the
    # failed restore is garbage collected at exit, after the one line that says it all.
    py_logging.getLogger("tensorflow").addFilter(_drop_unrestored_value_warnings)
    fail(_one_line(e))


def run_entry_point(main: Callable) -> None:
  """``absl.app.run(main, flags_parser=parse_flags)`` where a Ctrl-C before ``main`` runs
  (flag parsing) also exits 130 with one line instead of a traceback."""
  from absl import app  # pylint: disable=g-import-not-at-top
  try:
    app.run(main, flags_parser=parse_flags)
  except KeyboardInterrupt:
    sys.stderr.write(f"{program_name()}: stopped by Ctrl-C.\n")
    raise SystemExit(EXIT_INTERRUPTED) from None


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


# -- checks before the TensorFlow import -------------------------------------------------
def _local(path: str) -> bool:
  return "://" not in str(path)


def check_train_args(config, workdir: str) -> None:
  """What ``python -m hypernet.train`` can check without TensorFlow, so that a user error
  is reported in a second instead of after the TensorFlow import: the config
  (:func:`hypernet.config_lib.validate`: fields, types, ranges such as
  ``num_steps=0``), a workdir that is a file, and the IDX files of Fashion-MNIST / MNIST.

  Raises:
    ConfigError, NotADirectoryError, FileNotFoundError: naming the field, flag or file.
  """
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  config_lib.validate(config)
  check_workdir_is_folder(workdir)
  if config.task not in ("few_shot", "sinusoid") and \
      config.data.name in ("fashion_mnist", "mnist"):
    from hypernet.data import idx  # pylint: disable=g-import-not-at-top (NumPy only)
    idx.find_idx_dir(config.data.name, config.data.data_dir or None)


def plugins_in(config) -> str:
  """`` (model.name=my_lab:net, data.name=my_lab:load)``: the plug-ins ``config`` runs,
  for the first console line ("" when it runs none)."""
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  flat = config_lib.flatten(config)
  named = [f"{field}={flat[field]}" for field in config_lib.PLUGIN_FIELDS
           if field in flat and (config_lib.is_plugin_value(field, flat[field]) or (
               field == "data.name" and str(flat[field]).startswith("tfds:")))]
  return f" ({', '.join(named)})" if named else ""


def plugin_notices(config) -> list:
  """One-line notices of settings a plug-in run inherits from its base config that act on
  the user's data: ``data.augment_shift`` shifts every training image of a plug-in or
  TFDS data set (digits_hyper.py sets 1 for the digits; configs/plugin.py sets 0)."""
  name = str(config.data.name)
  if config.task not in ("classification", "multitask_classification"):
    return []
  if (":" in name) and int(config.data.augment_shift) > 0:
    return [f"config.data.augment_shift={config.data.augment_shift} shifts each training "
            f"image of config.data.name={name!r} by up to {config.data.augment_shift} "
            "pixel(s); --config.data.augment_shift=0 turns it off (configs/plugin.py starts "
            "a plug-in run without it)."]
  return []


def unread_override_notices(config, overrides) -> list:
  """One-line notices of the command line's ``--config.X=V`` overrides (``overrides``:
  ``{"optim.weight_decay": 1e-4, ...}``, ``config_flags.get_override_values``) that the run
  does not read (:func:`hypernet.config_lib.unread_fields`): a setting that would
  otherwise change nothing without a word."""
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  return config_lib.unread_fields(config, overrides)


def read_workdir_config(workdir: str, flag: str = "--workdir", step=None):
  """The config that wrote the workdir's checkpoint ``step`` (``workdir/config.json``, or
  the ``config_resumed_at_<N>.json`` of a resume that changed it before ``step``:
  :meth:`Workdir.config_at`; ``None``: the latest), validated; TensorFlow-free for
  local folders (``tf.io.gfile`` reads ``gs://``-style paths).

  Raises:
    NotADirectoryError: ``workdir`` is a file.
    FileNotFoundError: ``workdir`` holds no ``config.json`` (it is missing, empty or not a
      training workdir).
    ConfigError: the file does not fit this version's config schema.
  """
  import json  # pylint: disable=g-import-not-at-top
  from hypernet import config_lib  # pylint: disable=g-import-not-at-top
  check_workdir_is_folder(workdir, flag)
  path = Workdir(workdir).config
  if os.path.exists(path) or not _local(path):   # (Else the error below names config.json.)
    path = Workdir(workdir).config_at(step)
  if _local(path):
    exists, opener = os.path.exists(path), open
  else:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    exists, opener = tf.io.gfile.exists(path), tf.io.gfile.GFile
  if not exists:
    what = "does not exist" if not os.path.exists(workdir) or not _local(workdir) else \
        "holds no config.json"
    raise FileNotFoundError(f"{flag}={workdir} {what}: it must be a folder written by "
                            "python -m hypernet.train.")
  filled: list = []
  with opener(path) as f:
    config = config_lib.config_from_dict(json.load(f), filled)
  if filled:
    shown = ", ".join(filled[:6]) + (f" and {len(filled) - 6} more" if len(filled) > 6 else "")
    print(f"note: {path} predates {len(filled)} config field(s) ({shown}); they take their "
          "defaults, which keep the behaviour of the code that wrote it.", file=sys.stderr)
  return config


def check_checkpoint_exists(workdir: str, checkpoint=None) -> None:
  """Fails TensorFlow-free when a local workdir has no checkpoint to evaluate (or not the
  named one: a step number or a checkpoint prefix).

  Raises:
    FileNotFoundError: naming the checkpoint folder and what to do.
  """
  folder = Workdir(workdir).checkpoints
  if not _local(folder):
    return
  text = "" if checkpoint is None else str(checkpoint)
  if not text:
    if latest_checkpoint_step(folder) is None:
      raise FileNotFoundError(f"No checkpoint in {folder}: train first (python -m "
                              f"hypernet.train --workdir={workdir} ...).")
    return
  path = Workdir(workdir).checkpoint(text) if text.isdigit() else text
  if _local(path) and not os.path.exists(path + ".index"):
    present = sorted((int(m.group(1)) for m in (re.match(r"ckpt-(\d+)\.index$", f)
                      for f in (os.listdir(folder) if os.path.isdir(folder) else [])) if m))
    raise FileNotFoundError(f"--checkpoint={checkpoint}: {path} does not exist; the steps "
                            f"saved in {folder}: {present or 'none'}.")


def latest_checkpoint_step(folder: str) -> Optional[int]:
  """The step of the checkpoint named by ``folder/checkpoint`` (CheckpointManager's
  state file), without importing TensorFlow."""
  try:
    with open(os.path.join(folder, "checkpoint")) as f:
      match = re.search(r'^model_checkpoint_path: ".*?ckpt-(\d+)"', f.read(), re.M)
  except OSError:
    return None
  return int(match.group(1)) if match else None


def closing_summary(result: Mapping, workdir: str, exportable: bool = True) -> str:
  """The block a training run ends with: final test metrics (accuracy in %), steps, wall
  time, where the results are, and the next commands: evaluating / exporting the run and
  TensorBoard.

  Args:
    result: ``loop.train_and_evaluate``'s return value (or ``final_metrics.json``).
    workdir: the run's folder.
    exportable: whether the run has one target network to export
      (``export.exportable``); if not, the next command given is evaluating it.

  Returns:
    Six lines (seven with skipped steps), e.g.::

      Done: 10000 steps in 23.7 s.
        test:        accuracy 98.33%, loss 0.08423
        metrics:     /tmp/hypernet/digits_hyper/final_metrics.json
        checkpoints: /tmp/hypernet/digits_hyper/checkpoints (latest: step 10000)
        export:      python -m hypernet.evaluate --workdir=/tmp/hypernet/digits_hyper --export=/tmp/hypernet/digits_hyper/target.keras
        TensorBoard: tensorboard --logdir /tmp/hypernet/digits_hyper
  """
  import shlex  # pylint: disable=g-import-not-at-top
  skip = ("step", "start_step", "wall_time_sec", "skipped_steps", "interrupted_by_signal")
  metrics = {k: v for k, v in result.items() if k not in skip and "/" not in k}
  paths = Workdir(workdir)
  checkpoints = paths.checkpoints
  latest = latest_checkpoint_step(checkpoints)
  start = result.get("start_step") or 0
  ran = (f" in {result.get('wall_time_sec', 0):.1f} s" if not start else
         f" (resumed at step {start}: {result.get('step', start) - start} steps in "
         f"{result.get('wall_time_sec', 0):.1f} s)")
  quoted = shlex.quote(workdir)
  target = shlex.quote(paths.export)
  lines = [
      f"Done: {result.get('step', '?')} steps{ran}.",
      "  test:        " + format_metrics(metrics),
      f"  metrics:     {paths.final_metrics}",
      f"  checkpoints: {checkpoints}" + (f" (latest: step {latest})" if latest is not None
                                         else ""),
      f"  export:      python -m hypernet.evaluate --workdir={quoted} --export={target}"
      if exportable else f"  evaluate:    python -m hypernet.evaluate --workdir={quoted}",
      f"  TensorBoard: tensorboard --logdir {quoted}",
  ]
  if result.get("skipped_steps"):
    lines.insert(2, f"  skipped non-finite steps: {result['skipped_steps']}")
  return "\n".join(lines)
