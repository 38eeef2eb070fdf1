"""The supported range in one story: pyproject.toml's bounds, CI's oldest pair, the running
environment, the compatibility subset's list (tests/supported.py), and the tested range
with its run-time notice (hypernet/numerics/versions.py)."""
import ast
import logging
import re
import tomllib

import keras
import pytest
import tensorflow as tf

import supported
from conftest import REPO_ROOT
from hypernet.numerics import versions


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


def test_the_subset_files_printed_for_the_scripts_hold_every_subset_test(request):
  """``python tests/supported.py`` (what .ci/compat_subset.sh collects): every file with a
  test of the subset and no other, printed without importing Keras."""
  import subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  out = subprocess.run(
      [sys.executable, "-X", "importtime", str(REPO_ROOT / "tests" / "supported.py")],
      capture_output=True, text=True, check=True, cwd=REPO_ROOT)
  printed = out.stdout.split()
  assert printed == supported.subset_files()
  assert not re.search(r"\| +(keras|tensorflow)$", out.stderr, re.M)
  marked = {item.nodeid.split("::")[0] for item in request.session.items
            if item.get_closest_marker("compat_subset")}
  if len({item.nodeid.split("::")[0] for item in request.session.items}) > len(printed):
    assert marked == set(printed)   # A whole-suite run: the marked tests' files exactly.
  else:
    assert marked <= set(printed)


def test_requires_keras_skips_older_keras_with_the_reason():
  newer = f"{supported.KERAS[0]}.{supported.KERAS[1] + 1}"
  mark = supported.requires_keras(newer, "a feature")
  assert mark.args == (True,)
  assert mark.kwargs["reason"] == (f"needs Keras >= {newer} (a feature); Keras "
                                   f"{keras.__version__} is installed")
  assert supported.requires_keras("3.0", "anything").args == (False,)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
  monkeypatch.setattr(versions, "_noticed", set())


def test_inside_the_tested_range_says_nothing(caplog):
  with caplog.at_level(logging.WARNING, logger="hypernet"):
    for tf_version, keras_version in (("2.19.1", "3.11.3"), ("2.21.0", "3.15.1"),
                                      ("2.22.0rc0", "3.16.0.dev2026102704")):
      assert versions.notice_once(tf_version, keras_version) is None
  assert not caplog.records


def test_a_newer_release_gets_one_calm_notice(caplog):
  with caplog.at_level(logging.WARNING, logger="hypernet"):
    first = versions.notice_once("2.23.0", "3.15.1")
    assert versions.notice_once("2.23.0", "3.15.1") is None  # once per process
  assert len(caplog.records) == 1 and caplog.records[0].getMessage() == first
  assert "TensorFlow 2.23.0 is newer than the 2.22 hypernet is tested on" in first
  assert "expected to work" in first and "tools/forward_check.sh" in first
  assert "\n" not in first


def test_an_older_release_is_told_how_to_upgrade():
  message = versions.notice_once("2.21.0", "3.10.0")
  assert "Keras 3.10.0 is older than the 3.11 hypernet is tested on" in message
  assert "pip install -U 'tensorflow>=2.19' 'keras>=3.11'" in message
  assert "TensorFlow 2.21.0" not in message  # only Keras is outside


def test_unreadable_versions_are_left_alone():
  assert versions.major_minor("2.22.0rc0") == (2, 22)
  assert versions.major_minor("3.16.0.dev2026102704") == (3, 16)
  assert versions.notice_once("unknown", "nightly") is None


def test_the_tested_range_starts_at_ci_oldest_pins_and_the_package_lower_bounds():
  pins = dict(re.findall(r"^(tensorflow|keras)==(\d+\.\d+)",
                         (REPO_ROOT / ".ci" / "oldest.txt").read_text(), re.M))
  deps = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
  bounds = dict(re.findall(r"^(tensorflow|keras)>=(\d+\.\d+)$", "\n".join(deps), re.M))
  for name, library in (("tensorflow", "TensorFlow"), ("keras", "Keras")):
    oldest = "%d.%d" % versions.TESTED[library][0]
    assert pins[name] == oldest and bounds[name] == oldest, (name, pins, bounds)
  # Lower bounds only: no cap that would exclude a newer release that works.
  assert not [d for d in deps if "<" in d], deps


def test_keras_version_is_read_from_keras_nightly_too(monkeypatch):
  """A TensorFlow release candidate installs Keras as the ``keras-nightly`` distribution
  (no ``keras`` metadata): the subset's version facts read it from there."""
  import importlib.metadata  # pylint: disable=g-import-not-at-top

  def version(name):
    if name == "keras-nightly":
      return "3.16.0.dev2026102704"
    raise importlib.metadata.PackageNotFoundError(name)

  monkeypatch.setattr(importlib.metadata, "version", version)
  assert supported._keras_version() == "3.16.0.dev2026102704"  # pylint: disable=protected-access
  assert supported._version(supported._keras_version()) == (3, 16)  # pylint: disable=protected-access
  monkeypatch.setattr(importlib.metadata, "version", lambda name: (_ for _ in ()).throw(
      importlib.metadata.PackageNotFoundError(name)))
  with pytest.raises(importlib.metadata.PackageNotFoundError, match="keras-nightly"):
    supported._keras_version()  # pylint: disable=protected-access
