"""Op types of step_ratio.py's training-step graphs: identity via functional_call vs the
chunked hypernetwork (what the hypernetwork adds to a step), and their trained variables.

  python benchmarks/step_graph_ops.py
"""
import argparse, os, sys, collections
argparse.ArgumentParser(description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"
HERE = os.path.dirname(os.path.abspath(__file__)); sys.path.insert(0, os.path.join(HERE, "..", "configs")); sys.path.insert(0, HERE)
import keras, tensorflow as tf
import fashion_mnist_hyper
from hypernet.tasks import classification
from absl import flags
import step_ratio
flags.FLAGS(["x"])
data = step_ratio._fake_data()
x = tf.constant(data.x_train[:128], tf.float32) / 255.0
batch = {"image": x, "label": tf.constant(data.y_train[:128])}
for kind in ("none", "chunked"):
  cfg = fashion_mnist_hyper.get_config(); cfg.hypernet.kind = kind
  task = classification.ClassificationTask(cfg, data)
  v = task.trainable_variables; opt = keras.optimizers.Adam(1e-3); opt.build(v)
  step = step_ratio._task_step(task, v, opt)
  g = step.get_concrete_function(batch).graph.as_graph_def()
  cnt = collections.Counter(n.op for n in g.node)
  for f in g.library.function: cnt.update(n.op for n in f.node_def)
  print(kind, len(v), "vars", sum(cnt.values()), "ops", {k: c for k, c in sorted(cnt.items()) if k in ("MatMul","BatchMatMulV2","Conv2D","Conv2DBackpropFilter","Conv2DBackpropInput","Reshape","Transpose","ConcatV2","Slice","StridedSlice","Split","GatherV2","Einsum","Pad")})
  for var in v: print("   ", getattr(var, "path", var.name), tuple(var.shape))
