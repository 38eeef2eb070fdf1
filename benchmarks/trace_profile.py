"""Set-up profile of the Omniglot MAML train step: build, trace, first call, next call,
and the op types of the traced graph (every nested function: the task loop's body).

  python benchmarks/trace_profile.py {second|first} META_BATCH

Run from the repository root with ../shared/data/omniglot present (the two-zip subset,
15 queries per class, as benchmarks/meta_bench.py). Prints seconds and op counts.
"""
import collections, os, sys, tempfile, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
from hypernet import config_lib, train_lib
order = sys.argv[1]; mb = int(sys.argv[2])
c = config_lib.load_config_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "omniglot_maml.py"))
c.data.data_dir = "../shared/data/omniglot"
c.data.omniglot_zips = "images_background_small1.zip,images_background_small2.zip"
c.data.num_test_characters = 50
c.meta.learner = {"second": "maml", "first": "fomaml"}[order]
c.meta.num_queries = 15
c.batch_size = mb
with tempfile.TemporaryDirectory() as wd:
  t0 = time.perf_counter()
  tr = train_lib.Trainer(c, wd)
  it = tr.train_iterator(0)
  t1 = time.perf_counter()
  cf = tr._train_steps.get_concrete_function(it, tf.constant(1, tf.int64))
  t2 = time.perf_counter()
  print(f"build {t1-t0:.1f}s trace {t2-t1:.1f}s")
  gdef = cf.graph.as_graph_def()
  def count(nodes, name):
    c = collections.Counter(n.op for n in nodes)
    return c
  total = collections.Counter(n.op for n in gdef.node)
  for f in gdef.library.function:
    cnt = collections.Counter(n.op for n in f.node_def)
    interesting = {k: v for k, v in cnt.items() if any(s in k for s in ("Conv", "Pool", "Norm", "MatMul", "Softmax", "Relu", "Mean", "Sum"))}
    print(f.signature.name[:70], len(f.node_def), dict(sorted(interesting.items())))
    total.update(cnt)
  print("TOTAL", sum(total.values()))
  for k, v in sorted(total.items(), key=lambda kv: -kv[1])[:50]:
    print(f"  {k}: {v}")
  t3 = time.perf_counter(); tr.train_chunk(it, 1); t4 = time.perf_counter()
  tr.train_chunk(it, 1); t5 = time.perf_counter()
  print(f"first call (after trace) {t4-t3:.1f}s  second call {t5-t4:.1f}s")
