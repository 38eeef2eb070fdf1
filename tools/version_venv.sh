#!/usr/bin/env bash
# Makes (or brings up to date) a venv with hypernet (editable) and its test dependencies on
# one TensorFlow / Keras pair of the version matrix:
#
#   bash tools/version_venv.sh KIND [VENV_DIR]
#
# KIND: oldest  - CI's oldest supported pair (.ci/oldest.txt), as .ci/compat_subset.sh;
#       newest  - the newest releases of TensorFlow, Keras and TensorBoard;
#       pre     - the newest TensorFlow pre-release with the Keras it asks for (a TensorFlow
#                 release candidate asks for keras-nightly), else the newest Keras
#                 pre-release, else keras-nightly.
# VENV_DIR defaults to $HYPERNET_VENVS (default ~/.cache/hypernet-venvs)/KIND; a venv left
# there is reused. pip's output goes to VENV_DIR/pip-install.log. Prints the venv's path.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=$1
venv=${2:-${HYPERNET_VENVS:-$HOME/.cache/hypernet-venvs}/$kind}
if ! "$venv/bin/python" -c "" 2>/dev/null; then
  rm -rf "$venv"
  python -m venv "$venv" >&2
fi
py="$venv/bin/python"
log="$venv/pip-install.log"
: > "$log"
run_pip() {
  if ! "$py" -m pip install --disable-pip-version-check "$@" >> "$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "version venv ($kind): pip install $* failed (log above)." >&2
    exit 1
  fi
}
# hypernet's other dependencies and test extras, from pyproject.toml, without TensorFlow
# and Keras (keras and keras-nightly are one package under two names: pip would install
# keras over a keras-nightly that a TensorFlow release candidate asks for).
other_deps() {
  "$py" - <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = project["dependencies"] + project["optional-dependencies"]["test"]
print("\n".join(d for d in deps if re.split(r"[<>=!~\[ ;]", d)[0] not in ("tensorflow", "keras")))
PY
}
case "$kind" in
  oldest)
    run_pip -r .ci/oldest.txt -e ".[test]" ;;
  newest)
    "$py" -m pip uninstall -y -q keras-nightly tf-nightly >> "$log" 2>&1 || true
    run_pip --upgrade tensorflow keras tensorboard
    run_pip --upgrade -e ".[test]" ;;
  pre)
    # The other dependencies first: keras-hub's tensorflow-text pins TensorFlow below the
    # next release (tensorflow<2.22 for 2.21), so installed after the pre-release they
    # would put the released TensorFlow and Keras back. pip then warns that
    # tensorflow-text does not fit the pre-release; the matrix's tests do not load it.
    mapfile -t deps < <(other_deps)
    run_pip --upgrade "${deps[@]}"
    "$py" -m pip uninstall -y -q tensorflow keras keras-nightly >> "$log" 2>&1 || true
    run_pip --pre --upgrade tensorflow
    if ! "$py" -c "import keras" 2>/dev/null; then
      run_pip --pre --upgrade keras
      if ! "$py" -c "import importlib.metadata as m, sys; from packaging.version import Version
sys.exit(0 if Version(m.version('keras')).is_prerelease else 1)" 2>/dev/null; then
        "$py" -m pip uninstall -y -q keras >> "$log" 2>&1
        run_pip --pre --upgrade keras-nightly
      fi
    fi
    run_pip --no-deps -e . ;;
  *)
    echo "version venv: KIND must be oldest, newest or pre, not '$kind'." >&2
    exit 2 ;;
esac
echo "$venv"
