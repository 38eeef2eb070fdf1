"""oneDNN for TensorFlow's CPU kernels on every x86 CPU (hypernet/numerics/onednn.py).

TensorFlow turns oneDNN on by default only on x86 CPUs with AVX512_VNNI / AVX512_BF16 /
AVX_VNNI / AMX; :func:`prefer_onednn` sets ``TF_ENABLE_ONEDNN_OPTS=1`` before TensorFlow
loads unless the user chose. Checks the rule, and in a fresh process that it leaves
TensorFlow with oneDNN on (x86) or as the user set it.
"""
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from hypernet.numerics import onednn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_set_only_where_the_user_has_not_before_tensorflow_on_x86():
  env = {}
  assert onednn.prefer_onednn(env, {}, "x86_64") and env == {"TF_ENABLE_ONEDNN_OPTS": "1"}
  for value in ("0", "1", ""):
    env = {"TF_ENABLE_ONEDNN_OPTS": value}
    assert not onednn.prefer_onednn(env, {}, "x86_64") and env["TF_ENABLE_ONEDNN_OPTS"] == value
  env = {}
  assert not onednn.prefer_onednn(env, {"tensorflow": object()}, "x86_64") and not env
  for machine in ("aarch64", "arm64", "ppc64le"):
    assert not onednn.prefer_onednn(env, {}, machine) and not env
  assert onednn.prefer_onednn(env, {}, "AMD64")  # Windows' name


@pytest.mark.parametrize("user", [None, "0"])
def test_prefer_onednn_before_the_import_leaves_tensorflow_on_onednn_unless_the_user_chose(user):
  script = textwrap.dedent("""
      from hypernet.numerics import onednn
      onednn.prefer_onednn()
      from hypernet.numerics import compat
      print("ONEDNN", compat.onednn_enabled())
  """)
  env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
  if user is not None:
    env["TF_ENABLE_ONEDNN_OPTS"] = user
  env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
  done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, text=True,
                        capture_output=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  state = done.stdout.split("ONEDNN", 1)[1].split()[0]
  if state == "None":
    pytest.skip("this TensorFlow has no oneDNN query (compat.onednn_enabled)")
  x86 = platform.machine().lower() in ("x86_64", "amd64")
  assert state == str({None: x86, "0": False}[user]), (user, state)
