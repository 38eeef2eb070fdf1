"""What a pip install gets (pyproject.toml): every package, the committed configs, the
console scripts and one version. .ci/wheel_check.sh builds the wheel and runs it outside
the clone; these checks read the files only."""
import ast
import glob
import os
import re
import tomllib

from setuptools import find_packages

import hypernet
from conftest import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def test_the_wheel_lists_every_package_and_ships_configs_as_hypernet_configs():
  setuptools = PYPROJECT["tool"]["setuptools"]
  found = find_packages(str(REPO_ROOT), include=["hypernet", "hypernet.*"])
  assert sorted(setuptools["packages"]) == sorted(
      found + ["hypernet.configs", "hypernet.numerics.kernels"])
  assert setuptools["package-dir"] == {"hypernet.configs": "configs"}
  assert setuptools["package-data"] == {"hypernet.numerics.kernels": ["*.cc"],
                                        "hypernet.data": ["*.npz"]}
  assert glob.glob(str(REPO_ROOT / "hypernet" / "numerics" / "kernels" / "*.cc"))
  assert glob.glob(str(REPO_ROOT / "hypernet" / "data" / "*.npz")) == [
      str(REPO_ROOT / "hypernet" / "data" / "digits.npz")]
  assert not (REPO_ROOT / "hypernet" / "configs").exists()  # One copy: configs/.


def test_the_configs_work_wherever_they_are_installed():
  """Each config imports nothing but hypernet and builds only on configs beside it
  (``config_lib.sibling_config``), so the copy in ``hypernet/configs`` runs alone."""
  names = {os.path.basename(p)[:-3] for p in glob.glob(str(REPO_ROOT / "configs" / "*.py"))}
  assert "digits_hyper" in names and "__init__" not in names
  for name in sorted(names):
    tree = ast.parse((REPO_ROOT / "configs" / f"{name}.py").read_text())
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        assert all(a.name.split(".")[0] == "hypernet" for a in node.names), name
      elif isinstance(node, ast.ImportFrom):
        assert node.module.split(".")[0] == "hypernet", (name, node.module)
      elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "sibling_config":
        assert node.args[1].value in names, (name, node.args[1].value)


def test_one_version_the_console_scripts_and_the_licence():
  project = PYPROJECT["project"]
  assert project["dynamic"] == ["version"]
  assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
      "attr": "hypernet.__version__"}
  assert re.fullmatch(r"\d+\.\d+\.\d+", hypernet.__version__)
  assert project["scripts"] == {"hypernet-train": "hypernet.train:entry_point",
                                "hypernet-evaluate": "hypernet.evaluate:entry_point"}
  for target in project["scripts"].values():  # Not imported: both define --workdir.
    module, name = target.split(":")
    tree = ast.parse((REPO_ROOT / (module.replace(".", "/") + ".py")).read_text())
    assert name in [n.name for n in tree.body if isinstance(n, ast.FunctionDef)], target
  assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
  assert not [c for c in project["classifiers"] if c.startswith("License ::")]
  assert project["optional-dependencies"]["gpu"] == ["tensorflow[and-cuda]>=2.19"]
  assert "setuptools>=77" in PYPROJECT["build-system"]["requires"]  # PEP 639 license.
