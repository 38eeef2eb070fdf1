"""The tested version range (hypernet/numerics/versions.py): its notice, and that it agrees
with CI's oldest pins and the package's lower bounds."""
import logging
import os
import re
import tomllib

import pytest

from hypernet.numerics import versions

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


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
  pins = dict(re.findall(r"^(tensorflow|keras)==(\d+\.\d+)", open(
      os.path.join(ROOT, ".ci", "oldest.txt")).read(), re.M))
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
  bounds = dict(re.findall(r"^(tensorflow|keras)>=(\d+\.\d+)$", "\n".join(deps), re.M))
  for name, library in (("tensorflow", "TensorFlow"), ("keras", "Keras")):
    oldest = "%d.%d" % versions.TESTED[library][0]
    assert pins[name] == oldest and bounds[name] == oldest, (name, pins, bounds)
  # Lower bounds only: no cap that would exclude a newer release that works.
  assert not [d for d in deps if "<" in d], deps
