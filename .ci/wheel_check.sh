#!/usr/bin/env bash
# The package as a pip user gets it: builds the wheel, installs it (not editable, with its
# dependencies) into a venv that is not the dev environment, and from a directory outside
# the clone runs the README job for a few steps as `hypernet-train`, with the README's
# --config=configs/digits_hyper.py (found among the installed configs), and checks that
# `python -m hypernet.train` resolves to the installed package there too.
#
#   bash .ci/wheel_check.sh [VENV_DIR]
#   bash .ci/wheel_check.sh --fresh
#
# VENV_DIR defaults to $HYPERNET_VENVS (default ~/.cache/hypernet-venvs)/wheel: a venv of
# its own, whose requirements pip resolves from the wheel's metadata alone (a dependency
# used but not declared fails here). A venv left there by an earlier run is reused (pip
# brings it to the wheel's requirements), so only the first run downloads and installs
# TensorFlow (about 1.5-2.5 min; later runs about 40 s in all). --fresh: a new venv in a
# temporary folder that sees the running Python's packages (--system-site-packages), so
# the requirements are resolved against those, nothing is downloaded, and an undeclared
# dependency goes unnoticed. WHEEL_CHECK_STEPS (default 20) sets the steps of each run.
# Prints each phase's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ ${1:-} == --fresh ]]; then
  venv=$tmp/venv
  python -m venv --system-site-packages "$venv"
else
  venv=${1:-${HYPERNET_VENVS:-$HOME/.cache/hypernet-venvs}/wheel}
fi
steps=${WHEEL_CHECK_STEPS:-20}
pip=(python -m pip --disable-pip-version-check)
phase() { echo "wheel check: $1 ($((SECONDS - start)) s)"; start=$SECONDS; }
fail() { echo "wheel check: $1" >&2; exit 1; }
start=$SECONDS

# 1. The wheel, built as pip builds it for a user (an isolated build environment), from a
# copy of the checkout's files (tracked and untracked, not ignored): the build writes
# build/ and *.egg-info beside the sources, and .ci/run runs this beside other installs
# from the same checkout.
src=.
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  src=$tmp/src
  git ls-files -z --cached --others --exclude-standard | python -c "
import os, shutil, sys
for name in sys.stdin.buffer.read().decode().split('\0'):
  if name and os.path.isfile(name):  # (a tracked file deleted in the checkout is left out)
    os.makedirs(os.path.join(sys.argv[1], os.path.dirname(name)), exist_ok=True)
    shutil.copy2(name, os.path.join(sys.argv[1], name))" "$src"
fi
if ! "${pip[@]}" wheel --no-deps -w "$tmp/dist" "$src" > "$tmp/build.log" 2>&1; then
  tail -n 40 "$tmp/build.log"; fail "pip wheel failed (log above)."
fi
wheel=$(ls "$tmp"/dist/hypernet-*.whl)
python - "$wheel" <<'PY' || fail "the wheel lacks files (above)."
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = ["hypernet/__init__.py", "hypernet/train.py", "hypernet/configs/digits_hyper.py",
        "hypernet/numerics/kernels/norm_relu_pool.cc", "hypernet/data/digits.npz"]
missing = [n for n in need if n not in names]
configs = sum(n.startswith("hypernet/configs/") for n in names)
print(f"wheel check: {sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files, {configs} configs")
sys.exit(f"missing: {missing}" if missing else 0)
PY
phase "built the wheel"

# 2. Installed into its own venv: hypernet replaced, its requirements resolved by pip.
if ! "$venv/bin/python" -c "" 2>/dev/null; then
  rm -rf "$venv"
  python -m venv "$venv"
fi
vpip=("$venv/bin/python" -m pip --disable-pip-version-check)
# The wheel itself is forced into the venv first: a --fresh venv also sees the running
# Python's packages, where .ci/run's own `pip install -e` may be replacing hypernet at this
# moment (one CI run imported the checkout's editable hypernet here, not the wheel). Then
# pip resolves the wheel's requirements.
if ! { "${vpip[@]}" uninstall -y hypernet && \
       "${vpip[@]}" install --force-reinstall --no-deps "$wheel" && \
       "${vpip[@]}" install "$wheel"; } > "$venv/pip-install.log" 2>&1; then
  tail -n 40 "$venv/pip-install.log"; fail "pip could not install $wheel into $venv (log above)."
fi
phase "installed it into $venv"

# 3. The README job from elsewhere: no clone on the path, configs/ not in the directory.
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
unset PYTHONPATH
"$venv/bin/python" - <<'PY' || fail "the venv does not import the installed wheel (above)."
import os, sys, hypernet
print(f"wheel check: hypernet {hypernet.__version__} from {os.path.dirname(hypernet.__file__)}")
assert hypernet.__file__.startswith(sys.prefix), "not the venv's own install"
assert os.path.isfile(os.path.join(os.path.dirname(hypernet.__file__), "configs",
                                   "digits_hyper.py"))
PY
workdir="$tmp/hypernet-train"
if ! "$venv/bin/hypernet-train" --config=configs/digits_hyper.py --workdir="$workdir" \
    --config.num_steps="$steps" > "$tmp/run.log" 2>&1; then
  tail -n 40 "$tmp/run.log"; fail "hypernet-train failed (log above)."
fi
[[ -f $workdir/final_metrics.json ]] || fail "hypernet-train wrote no $workdir/final_metrics.json."
grep "^Done:" "$tmp/run.log"
phase "hypernet-train --config=configs/digits_hyper.py --config.num_steps=$steps"
# README command 1's form runs the same entry point: here it only has to resolve to the
# venv's install from outside the clone (--version answers before TensorFlow loads).
[[ $("$venv/bin/python" -m hypernet.train --version) == "hypernet "* ]] || \
  fail "python -m hypernet.train --version did not answer from the venv."
"$venv/bin/hypernet-evaluate" --version
echo "wheel check: passed in $SECONDS s"
