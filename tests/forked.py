"""Scripts that each need a process of their own (a first import, a first build or load of
the kernel, a process-wide install), run as children forked from one launch of Python
after TensorFlow, Keras and NumPy load (not what any of them tests): one TensorFlow
start-up for all of them instead of one each."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# argv: DIR, then {name: [script, extra environment, script arguments]} as JSON. Each child
# writes its stdout, stderr and exit status to DIR/NAME.out / .err / .status.
_LAUNCHER = """
import json, os, sys, traceback
import keras, numpy, tensorflow  # Not ours: loaded once, before the forks.
folder, runs = sys.argv[1], json.loads(sys.argv[2])
for name, (script, env, argv) in runs.items():
  sys.stdout.flush(); sys.stderr.flush()
  pid = os.fork()
  if pid == 0:  # A child with no hypernet module loaded runs just this script.
    status = 0
    for fd, ext in ((1, "out"), (2, "err")):
      os.dup2(os.open(os.path.join(folder, name + "." + ext),
                      os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    os.environ.update(env)
    sys.argv = ["-c", *argv]
    try:
      exec(compile(script, name, "exec"), {"__name__": "__main__"})
    except BaseException:
      traceback.print_exc()
      status = 1
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(status)
  with open(os.path.join(folder, name + ".status"), "w") as f:
    f.write(str(os.waitpid(pid, 0)[1]))
"""


def run_each(folder, runs: dict, env: dict, timeout: float) -> dict:
  """Runs each script in a child of its own, one after the other.

  Args:
    folder: a pathlib.Path for the children's output files.
    runs: ``{name: (script, extra environment, script arguments)}``.
    env: the launch's environment (the repository is put first on its PYTHONPATH).
    timeout: seconds for all of them.

  Returns:
    ``{name: (wait status, stdout, stderr)}``.
  """
  env = dict(env, PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""))
  done = subprocess.run([sys.executable, "-c", _LAUNCHER, str(folder), json.dumps(runs)],
                        env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                        check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  return {name: (int((folder / f"{name}.status").read_text()),
                 (folder / f"{name}.out").read_text(), (folder / f"{name}.err").read_text())
          for name in runs}
