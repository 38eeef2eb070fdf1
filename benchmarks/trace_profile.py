"""Set-up profile of the Omniglot MAML train step: build, trace, first call, next call,
and the op types of the traced graph (every nested function: the task loop's body).

  python benchmarks/trace_profile.py {second|first} META_BATCH [--data_dir=DIR]

Needs the Omniglot two-zip subset in --data_dir (default: ../shared/data/omniglot beside
the repository root; 15 queries per class, as benchmarks/meta_bench.py). Prints seconds
and op counts.
"""
import argparse, collections, os, sys, tempfile, time
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
parser = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("order", choices=["second", "first"],
                    help="second: MAML; first: first-order MAML (fomaml)")
parser.add_argument("meta_batch", type=int, metavar="META_BATCH",
                    help="tasks per meta-batch (config.batch_size)")
parser.add_argument("--data_dir", default=os.path.normpath(
    os.path.join(REPO, "..", "shared", "data", "omniglot")),
                    help="folder of the Omniglot zips (default: %(default)s)")
args = parser.parse_args()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
from hypernet import config_lib
from hypernet.training import loop
order = args.order; mb = args.meta_batch
c = config_lib.load_config_file(os.path.join(REPO, "configs", "omniglot_maml.py"))
c.data.data_dir = args.data_dir
c.data.omniglot_zips = "images_background_small1.zip,images_background_small2.zip"
c.data.num_test_characters = 50
c.meta.learner = {"second": "maml", "first": "fomaml"}[order]
c.meta.num_queries = 15
c.batch_size = mb
with tempfile.TemporaryDirectory() as wd:
  t0 = time.perf_counter()
  tr = loop.Trainer(c, wd)
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
