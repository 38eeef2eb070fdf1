"""The supported range in one story: pyproject.toml's bounds, CI's oldest pair, the running
environment, and the compatibility subset's list (tests/supported.py)."""
import ast
import re
import tomllib

import keras
import tensorflow as tf

import supported
from conftest import REPO_ROOT


def _requirements():
  project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
  return {re.split(r"[<>=\[]", s)[0]: s for s in project["dependencies"]}


def _bounds(spec):
  """``(lowest, below)`` of a requirement; ``below`` is None without an upper bound."""
  low = re.search(r">=([\d.]+)", spec).group(1)
  high = re.search(r"<([\d.]+)", spec)
  return (supported._version(low),  # pylint: disable=protected-access
          supported._version(high.group(1)) if high else None)  # pylint: disable=protected-access


def test_oldest_pair_is_the_lower_bound_and_this_environment_is_in_range():
  reqs = _requirements()
  pins = dict(re.match(r"([\w-]+)==([\d.]+)", line).groups()
              for line in (REPO_ROOT / ".ci" / "oldest.txt").read_text().splitlines()
              if line and not line.startswith("#"))
  for package in ("tensorflow", "keras", "tensorboard"):
    low, high = _bounds(reqs[package])
    assert supported._version(pins[package]) == low, package  # pylint: disable=protected-access
  for package, version in (("tensorflow", tf.__version__), ("keras", keras.__version__)):
    low, high = _bounds(reqs[package])
    assert low <= supported._version(version) and (high is None or supported._version(  # pylint: disable=protected-access
        version) < high), (package, version)  # pylint: disable=protected-access


def test_every_subset_entry_names_a_test():
  for entry in supported.COMPAT_SUBSET:
    path, _, name = entry.partition("::")
    file = REPO_ROOT / "tests" / path
    assert file.is_file(), entry
    if name:
      names = {n.name for n in ast.parse(file.read_text()).body
               if isinstance(n, ast.FunctionDef)}
      assert name.split("[")[0] in names, entry
  assert supported.in_subset("tests/test_meta.py::test_maml_toy_exact[eager-1-False-dense]")
  assert supported.in_subset("tests/test_functional.py::test_errors_name_the_problem")
  assert not supported.in_subset("tests/test_meta.py::test_anil_exact[False]")
  assert supported.in_subset(
      "tests/test_meta_batch.py::test_conv4_meta_batch_matches_per_task_loop[metasgd]")
  assert not supported.in_subset(
      "tests/test_meta_batch.py::test_conv4_meta_batch_matches_per_task_loop[maml]")


def test_requires_keras_skips_older_keras_with_the_reason():
  newer = f"{supported.KERAS[0]}.{supported.KERAS[1] + 1}"
  mark = supported.requires_keras(newer, "a feature")
  assert mark.args == (True,)
  assert mark.kwargs["reason"] == (f"needs Keras >= {newer} (a feature); Keras "
                                   f"{keras.__version__} is installed")
  assert supported.requires_keras("3.0", "anything").args == (False,)
