"""Each instruction-set variant of the fused BatchNorm -> ReLU -> max-pool kernel against
the portable build (hypernet/numerics/norm_relu_pool.py, ``HYPERNET_KERNEL_ARCH``).

The kernel's vector code is what the compiler makes of its ``#pragma omp simd`` loops for
the target options, so each variant is a different code path: SSE4.2 (``-march=x86-64-v2``,
the portable build), AVX2 + FMA (``-march=x86-64-v3``), AVX-512 (``-march=x86-64-v4``)
and this CPU's own (``-march=native``). Every variant this CPU can run is built in a
process of its own (two builds of the op cannot load in one process) and its values, first
derivatives and second derivatives (the registered gradient of the gradient, every input)
on fixed inputs must equal the portable build's to float32 rounding (float64: 1e-12).
A variant needing instruction sets this CPU lacks is skipped here; that the library
refuses it (before building it, in one line naming ``HYPERNET_KERNEL_ARCH``) is checked.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import forked
from hypernet.numerics import norm_relu_pool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {"portable": "-march=x86-64-v2", "avx2": "-march=x86-64-v3",
            "avx512": "-march=x86-64-v4", "native": "-march=native"}
# Instruction sets each variant's code must be allowed to use (and the portable one not).
NEEDS = {"portable": ["sse4_2"], "avx2": ["avx", "avx2", "fma"],
         "avx512": ["avx512f", "avx512bw", "avx512vl"], "native": []}

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, tensorflow as tf
    from hypernet.numerics import norm_relu_pool
    assert norm_relu_pool.library() is not None, norm_relu_pool.load_error()
    report = norm_relu_pool.build_report()
    out = {}
    for name, shape, dtype in [("f32", (6, 12, 12, 64), tf.float32),
                               ("odd32", (3, 7, 5, 5), tf.float32),
                               ("f64", (3, 6, 6, 20), tf.float64)]:
      rng = np.random.default_rng(0)
      n, h, w, c = shape
      # Per channel a permutation of 0..NHW-1: every 2x2 window's maximum and every ReLU
      # input is far (>= 1 / std) from a tie or a kink, so no rounding flips a selection.
      x = np.stack([rng.permutation(n * h * w) for _ in range(c)], -1).reshape(shape)
      x = tf.constant(x, dtype)
      gamma = tf.constant(rng.choice([-1.0, 1.0], c) * rng.uniform(0.5, 2.0, c), dtype)
      beta = tf.zeros([c], dtype)
      u = tf.constant(rng.normal(size=(n, h // 2, w // 2, c)), dtype)
      vx = tf.constant(rng.normal(size=shape), dtype)
      vg = tf.constant(rng.normal(size=c), dtype)
      vb = tf.constant(rng.normal(size=c), dtype)
      with tf.GradientTape(persistent=True) as outer:
        outer.watch([x, gamma, beta, u])
        with tf.GradientTape() as inner:
          inner.watch([x, gamma, beta])
          y, mean, var = norm_relu_pool.norm_relu_pool(x, gamma, beta, 1e-3)
          loss = tf.reduce_sum(y * u)
        dx, dg, db = inner.gradient(loss, [x, gamma, beta])
        s = tf.reduce_sum(dx * vx) + tf.reduce_sum(dg * vg) + tf.reduce_sum(db * vb)
      hx, hg, hu = outer.gradient(s, [x, gamma, u])
      for key, t in dict(y=y, mean=mean, var=var, dx=dx, dgamma=dg, dbeta=db,
                         hvp_x=hx, hvp_gamma=hg, hvp_dy=hu).items():
        out[f"{name}/{key}"] = t.numpy()
    np.savez(sys.argv[1], **out)
    print("REPORT" + json.dumps(report))
""")


def _runs_here(variant: str) -> bool:
  isa = norm_relu_pool.target_isa(VARIANTS[variant].split())
  return isa is not None and set(isa) <= norm_relu_pool.cpu_extensions()


@pytest.fixture(scope="module")
def variant_runs(tmp_path_factory) -> dict:
  """``{variant: the folder of its files}``: ``SCRIPT`` run for the portable build and
  every variant this CPU runs, each built and run in a process of its own (forked
  children of one launch of Python)."""
  folder = tmp_path_factory.mktemp("variants")
  variants = {v: VARIANTS[v] for v in VARIANTS if v == "portable" or _runs_here(v)}
  env = dict(os.environ, KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="",
             TF_CPP_MIN_LOG_LEVEL="2")
  env.pop(norm_relu_pool.ARCH_ENV, None)
  runs = {v: (SCRIPT, {norm_relu_pool.ARCH_ENV: flags}, [str(folder / f"{v}.npz")])
          for v, flags in variants.items()}
  forked.run_each(folder, runs, env, 300 * len(variants))  # Each variant's 300 s.
  return {v: folder for v in variants}


def _run(variant: str, variant_runs) -> tuple:
  """Outputs of ``SCRIPT`` under ``variant`` and the kernel's build report."""
  folder = variant_runs[variant]
  status = int((folder / f"{variant}.status").read_text())
  assert status == 0, (folder / f"{variant}.err").read_text()[-3000:]
  stdout = (folder / f"{variant}.out").read_text()
  report = json.loads(stdout.split("REPORT", 1)[1].splitlines()[0])
  return dict(np.load(folder / f"{variant}.npz")), report


@pytest.fixture(scope="module")
def portable(variant_runs):
  return _run("portable", variant_runs)


def test_the_portable_build_uses_no_vector_extension_beyond_sse4_2(portable):
  _, report = portable
  assert VARIANTS["portable"] in report["flags"].split(), report
  assert report["loaded"] and report["isa"] == ["sse4_2"], report


@pytest.mark.parametrize("variant", ["avx2", "avx512", "native"])
def test_variant_equals_the_portable_build_to_rounding(variant, portable, variant_runs):
  if norm_relu_pool.target_isa(["-march=x86-64-v2"]) is None:
    pytest.skip("no C++ compiler that answers -dM -E")
  if not _runs_here(variant):
    pytest.skip(f"this CPU lacks {VARIANTS[variant]}'s instruction sets")
  got, report = _run(variant, variant_runs)
  assert VARIANTS[variant] in report["flags"].split(), report
  assert set(NEEDS[variant]) <= set(report["isa"]), report
  want, _ = portable
  for key, ref in want.items():
    # float32: a few units of rounding of the tensor's largest entry (sums over up to
    # 864 terms run in another order); float64 likewise at its own epsilon.
    eps = np.finfo(ref.dtype).eps
    scale = max(float(np.abs(ref).max()), 1.0)
    err = float(np.abs(got[key] - ref).max()) / scale
    assert np.isfinite(err) and err <= 64 * eps, (key, err, eps)


def _vectorised_loops(arch: str, tmp_path) -> set:
  """Source lines of the kernel's loops that g++ vectorises for ``arch`` (compiled to an
  object file with ``-fopt-info-vec-optimized``; no CPU support needed)."""
  import re  # pylint: disable=g-import-not-at-top
  cmd = norm_relu_pool.compile_command(str(tmp_path / "k.o"), arch.split(),
                                       vectorizer_report=True)
  done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  return {int(m.group(1)) for line in done.stderr.splitlines()
          for m in [re.search(r"norm_relu_pool\.cc:(\d+):\d+: optimized: loop vectorized",
                              line)] if m}


def test_the_avx2_build_vectorises_every_loop_the_avx512_build_does(tmp_path):
  """No loop is fast only with AVX-512's mask registers: the scatter into the 2x2 windows
  (first and second order) is two selects on 32-bit lanes, which AVX2 vectorises; with a
  ``&&`` between its float and uint8 comparisons g++ left it scalar for AVX2, and the
  AVX2 builds ran 11-18% slower relative to the default one (docs/performance.md, Zen 4)."""
  if norm_relu_pool.target_isa(["-march=x86-64-v2"]) is None:
    pytest.skip("no C++ compiler that answers -dM -E")
  avx512 = _vectorised_loops("-march=x86-64-v4", tmp_path)
  avx2 = _vectorised_loops("-march=x86-64-v3", tmp_path)
  assert len(avx512) >= 12, avx512   # 16 of the kernel's loops (the parse still works)
  assert avx512 <= avx2, sorted(avx512 - avx2)


def test_a_variant_this_cpu_cannot_run_is_refused_before_it_is_built(tmp_path):
  cpu = norm_relu_pool.cpu_extensions()
  if not cpu:
    pytest.skip("no /proc/cpuinfo")
  # A target option of an extension this CPU lacks; AVX512-FP16 where it has that too.
  missing = next((opt for opt, name in [("-mavx512f", "avx512f"),
                                          ("-mamx-tile", "amx_tile")] if name not in cpu),
                 None)
  if missing is None or norm_relu_pool.target_isa(["-march=x86-64-v2"]) is None:
    pytest.skip("this CPU has every extension the check would use, or no compiler")
  script = textwrap.dedent("""
      from hypernet.numerics import norm_relu_pool
      assert norm_relu_pool.library() is None
      print("ERROR:" + norm_relu_pool.load_error().splitlines()[0])
  """)
  cache = tmp_path / "cache"
  env = dict(os.environ, HYPERNET_KERNEL_CACHE=str(cache), CUDA_VISIBLE_DEVICES="",
             TF_CPP_MIN_LOG_LEVEL="2", **{norm_relu_pool.ARCH_ENV: f"-march=x86-64-v2 {missing}"})
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT,
                        capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  line = done.stdout.split("ERROR:", 1)[1]
  assert "which this CPU lacks" in line and norm_relu_pool.ARCH_ENV in line, line
  assert not cache.exists() or not os.listdir(cache)  # nothing built


def test_a_bad_arch_value_is_one_line_naming_the_variable(monkeypatch):
  monkeypatch.setenv(norm_relu_pool.ARCH_ENV, "native")
  with pytest.raises(ValueError, match=r"HYPERNET_KERNEL_ARCH='native': 'native' is not a "
                     "compiler target option"):
    norm_relu_pool.arch_flags()
  monkeypatch.setenv(norm_relu_pool.ARCH_ENV, "-march=x86-64-v3 -mtune=znver3")
  assert norm_relu_pool.arch_flags() == ["-march=x86-64-v3", "-mtune=znver3"]
  monkeypatch.delenv(norm_relu_pool.ARCH_ENV)
  assert norm_relu_pool.arch_flags() == ["-march=native"]
