"""benchmarks/gpu_check.py runs on a machine without a GPU: the GPU rows say why they are
skipped, every other row is measured (tiny), and the table lists every row."""
import json
import subprocess
import sys

import pytest

from conftest import REPO_ROOT


@pytest.mark.slow
def test_gpu_check_runs_on_cpu_with_its_gpu_rows_skipped(tmp_path):
  out = tmp_path / "rows.json"
  proc = subprocess.run(
      [sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_check.py"), "--cpu_only",
       "--cpu_steps=4", f"--json={out}"],
      capture_output=True, text=True, timeout=900, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = json.loads(out.read_text())
  skipped = [r for r in rows if r["result"] == "skipped"]
  measured = [r for r in rows if r["result"] != "skipped"]
  assert all(r["note"] == "--cpu_only: GPU row" for r in skipped), skipped
  # GPU rows: mixed precision (2 policies x XLA off/on x 2 steps), MirroredStrategy
  # against one device, peak memory.
  assert len(skipped) == 8 + 2 + 1
  assert {r["dtype"] for r in skipped if r["dtype"]} == {"mixed_bfloat16", "mixed_float16",
                                                         "float32"}
  assert [r["row"] for r in measured] == ["README job (digits_hyper)"] + \
      ["hypernetwork step"] * 2 + ["MAML meta-step"] * 2
  job = measured[0]
  assert job["note"] == "4 steps (tiny: CPU)" and job["xla"] == "off"
  accuracy = float(job["result"].split()[1])
  assert 0.0 <= accuracy <= 1.0
  for r in measured[1:]:
    assert r["dtype"] == "float32" and r["peak_gpu_mb"] is None
    assert float(r["result"].split()[0]) > 0 and r["result"].endswith("steps/s")
  assert [r["xla"] for r in measured[1:]] == ["off", "on", "off", "on"]
  table = proc.stdout[proc.stdout.index("| row |"):]
  assert table.count("\n|") == len(rows) + 1  # header rule + one line per row
