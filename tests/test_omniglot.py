"""Tests for hypernet.data.omniglot on the Omniglot zips in shared/data/omniglot."""
import io
import os
import shutil
import time
import zipfile

import numpy as np
import pytest
from PIL import Image

from hypernet.data import omniglot

SMALL = ("images_background_small1.zip", "images_background_small2.zip")


@pytest.fixture(scope="module")
def odir(data_dir):
  return data_dir / "omniglot"


@pytest.fixture(scope="module")
def small1(odir):
  return omniglot.load_omniglot(odir / SMALL[0])


def _original_ink(odir, member):
  with zipfile.ZipFile(odir / SMALL[0]) as zf, Image.open(io.BytesIO(zf.read(member))) as im:
    return 1.0 - np.asarray(im, dtype=np.float32)  # "1" mode: True = paper


def test_load_one_zip(odir, small1):
  assert small1.images.shape == (2720, 28, 28, 1) and small1.images.dtype == np.float32
  assert small1.labels.dtype == np.int32 and small1.num_classes == 136
  np.testing.assert_array_equal(np.bincount(small1.labels), [20] * 136)
  assert np.all(np.diff(small1.labels) >= 0)  # grouped by label
  assert small1.class_names[0] == "Balinese/character01"
  assert list(small1.class_names) == sorted(small1.class_names)
  assert {n.split("/")[0] for n in small1.class_names} == {
      "Balinese", "Early_Aramaic", "Greek", "Korean", "Latin"}
  assert 0.0 <= small1.images.min() and small1.images.max() <= 1.0
  # Ink = 1: strokes are the minority of pixels, the border (paper) is 0.
  assert 0.04 < small1.images.mean() < 0.15
  # Box resampling keeps the ink mass: mean of the 28x28 image = mean of the 105x105
  # original, up to the uint8 rounding of each output pixel (<= 0.5/255).
  original = _original_ink(odir, "images_background_small1/Balinese/character01/0108_01.png")
  assert abs(small1.images[0].mean() - original.mean()) < 0.5 / 255 + 1e-6
  # At full size the images are the PNGs themselves, inverted.
  full = omniglot.load_omniglot(odir / SMALL[0], image_size=105)
  np.testing.assert_array_equal(full.images[0, :, :, 0], original)
  # "nearest" gives binary images.
  nearest = omniglot.load_omniglot(odir / SMALL[0], resample="nearest")
  assert set(np.unique(nearest.images).tolist()) == {0.0, 1.0}


def test_load_two_zips_is_the_union_and_fast(odir):
  omniglot.clear_cache()
  t0 = time.perf_counter()
  both = omniglot.load_omniglot(list(SMALL), data_dir=odir)
  seconds = time.perf_counter() - t0
  print(f"decoded 5840 Omniglot PNGs in {seconds:.2f} s")
  # The two subsets share Greek (24) and Latin (26): 136 + 156 - 50 distinct characters.
  assert both.num_classes == 242 and both.images.shape == (4840, 28, 28, 1)
  # The labelling is by sorted name, independent of the order of the zips.
  reverse = omniglot.load_omniglot(list(SMALL[::-1]), data_dir=odir)
  assert reverse.class_names == both.class_names
  np.testing.assert_array_equal(reverse.images, both.images)
  # The cache hands out copies: writing to one result does not change the next.
  both.images[:] = -1.0
  again = omniglot.load_omniglot(list(SMALL), data_dir=odir)
  np.testing.assert_array_equal(again.images, reverse.images)


def test_decoded_zips_load_from_the_disk_cache_in_another_process_equal(
    odir, tmp_path, monkeypatch):
  """The disk cache gives back what decoding gives (images, labels, names, drawing
  names), without decoding; a changed zip, a corrupt cache file and an unwritable folder
  decode again without an error; ``HYPERNET_CACHE_DIR=""`` writes nothing."""
  cache = tmp_path / "cache"
  monkeypatch.setenv("HYPERNET_CACHE_DIR", str(cache))
  zip_path = tmp_path / SMALL[0]
  shutil.copy(odir / SMALL[0], zip_path)
  omniglot.clear_cache()
  decoded = omniglot.load_omniglot(zip_path, image_size=20)
  files = list((cache / "omniglot").glob("*.npz"))
  assert len(files) == 1 and files[0].name.startswith("images_background_small1-20px-box-")
  key = next(iter(omniglot._CACHE))  # pylint: disable=protected-access

  decodes = []
  real_decode = omniglot._decode  # pylint: disable=protected-access
  monkeypatch.setattr(omniglot, "_decode",
                      lambda *a: decodes.append(1) or real_decode(*a))
  omniglot.clear_cache()  # As a new process: only the disk copy is left.
  cached = omniglot.load_omniglot(zip_path, image_size=20)
  assert not decodes
  np.testing.assert_array_equal(cached.images, decoded.images)
  np.testing.assert_array_equal(cached.labels, decoded.labels)
  assert cached.class_names == decoded.class_names
  assert omniglot._CACHE[key] is not None and all(  # pylint: disable=protected-access
      names[0].endswith(".png") and len(names) == 20
      for names, _ in omniglot._CACHE[key].values())  # pylint: disable=protected-access

  # A corrupt cache file: decoded again, and the file rewritten whole.
  files[0].write_bytes(b"not an npz")
  omniglot.clear_cache()
  again = omniglot.load_omniglot(zip_path, image_size=20)
  assert decodes and len(decodes) == 2720
  np.testing.assert_array_equal(again.images, decoded.images)
  omniglot.clear_cache()
  decodes.clear()
  omniglot.load_omniglot(zip_path, image_size=20)
  assert not decodes

  # A changed zip (another modification time): another key, decoded again.
  stat = zip_path.stat()
  os.utime(zip_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
  omniglot.clear_cache()
  omniglot.load_omniglot(zip_path, image_size=20)
  assert len(decodes) == 2720 and len(list((cache / "omniglot").glob("*.npz"))) == 2

  # No cache, and a cache that cannot be written: decoded, nothing written, no error.
  for setting in ("", str(zip_path)):  # A file where the folder would be.
    monkeypatch.setenv("HYPERNET_CACHE_DIR", setting)
    omniglot.clear_cache()
    decodes.clear()
    assert omniglot.load_omniglot(zip_path, image_size=20).num_classes == 136
    assert len(decodes) == 2720
  assert omniglot.disk_cache_dir() is not None
  monkeypatch.setenv("HYPERNET_CACHE_DIR", "")
  assert omniglot.disk_cache_dir() is None
  omniglot.clear_cache()


def test_split_by_character_is_disjoint_deterministic_and_rotated(small1):
  train, test = omniglot.split_by_character(small1, seed=0, num_test_characters=36)
  assert train.num_classes == 4 * 100 and test.num_classes == 4 * 36
  assert train.images.shape == (400 * 20, 28, 28, 1)
  assert test.images.shape == (144 * 20, 28, 28, 1)
  char = lambda name: name.rsplit("/", 1)[0]
  train_chars = {char(n) for n in train.class_names}
  test_chars = {char(n) for n in test.class_names}
  assert len(train_chars) == 100 and len(test_chars) == 36
  assert not train_chars & test_chars
  assert train_chars | test_chars == set(small1.class_names)
  # Every rotation of each test character is in test.
  assert {n.rsplit("/", 1)[1] for n in test.class_names} == {"rot0", "rot90", "rot180",
                                                               "rot270"}
  # Class c*4 + r is character c rotated by r*90 degrees counter-clockwise.
  name = test.class_names[4 * 5]
  original = small1.images[small1.labels == small1.class_names.index(char(name))]
  for r in range(4):
    got = test.images[test.labels == 4 * 5 + r]
    np.testing.assert_array_equal(got, np.rot90(original, k=r, axes=(1, 2)))
    assert test.class_names[4 * 5 + r] == f"{char(name)}/rot{90 * r}"
  np.testing.assert_array_equal(np.bincount(test.labels), [20] * 144)
  # Deterministic by seed; another seed, another split.
  train2, test2 = omniglot.split_by_character(small1, seed=0, num_test_characters=36)
  assert test2.class_names == test.class_names
  np.testing.assert_array_equal(test2.images, test.images)
  _, test3 = omniglot.split_by_character(small1, seed=1, num_test_characters=36)
  assert test3.class_names != test.class_names


def test_split_from_zip_paths_and_fraction(odir):
  train, test = omniglot.split_by_character(list(SMALL), seed=3, test_fraction=0.25,
                                            data_dir=odir, rotations=None)
  assert test.num_classes == round(0.25 * 242) == 60 and train.num_classes == 182
  assert not set(train.class_names) & set(test.class_names)
  # The same characters whatever the order of the zips.
  _, test_rev = omniglot.split_by_character(list(SMALL[::-1]), seed=3, test_fraction=0.25,
                                            data_dir=odir, rotations=None)
  assert test_rev.class_names == test.class_names


def test_split_arguments(small1):
  with pytest.raises(ValueError, match="exactly one of num_test_characters"):
    omniglot.split_by_character(small1, seed=0)
  with pytest.raises(ValueError, match="exactly one of num_test_characters"):
    omniglot.split_by_character(small1, seed=0, num_test_characters=3, test_fraction=0.1)
  with pytest.raises(ValueError, match="num_test_characters=136"):
    omniglot.split_by_character(small1, seed=0, num_test_characters=136)
  with pytest.raises(ValueError, match="test_fraction"):
    omniglot.split_by_character(small1, seed=0, test_fraction=1.0)
  with pytest.raises(ValueError, match="rotations"):
    omniglot.split_by_character(small1, seed=0, test_fraction=0.5, rotations=(0, 45))
  with pytest.raises(ValueError, match="image_size"):
    omniglot.load_omniglot(SMALL[0], image_size=0)


def test_missing_truncated_and_corrupt_zips_are_named(odir, tmp_path):
  missing = tmp_path / "images_evaluation.zip"
  with pytest.raises(FileNotFoundError, match=r"images_evaluation\.zip.*github\.com/brendenlake"):
    omniglot.load_omniglot(missing)
  with pytest.raises(FileNotFoundError, match="all_runs.zip"):
    omniglot.load_one_shot_runs(tmp_path / "all_runs.zip")
  data = (odir / SMALL[0]).read_bytes()
  truncated = tmp_path / "truncated.zip"
  truncated.write_bytes(data[: len(data) // 2])
  with pytest.raises(ValueError, match=r"truncated\.zip.*truncated or corrupt.*omniglot"):
    omniglot.load_omniglot(truncated)
  # Flip bytes inside one member's compressed data: the CRC check or PNG decoder fails.
  corrupt = tmp_path / "corrupt.zip"
  shutil.copy(odir / SMALL[0], corrupt)
  with zipfile.ZipFile(corrupt) as zf:
    info = zf.getinfo("images_background_small1/Korean/character10/0652_05.png")
  raw = bytearray(corrupt.read_bytes())
  start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
  for i in range(start + 40, start + 60):
    raw[i] ^= 0xFF
  corrupt.write_bytes(bytes(raw))
  with pytest.raises(ValueError, match=r"corrupt\.zip.*0652_05\.png.*Download it again"):
    omniglot.load_omniglot(corrupt)
  # A zip in another layout (the runs) is refused with a pointer to the right loader.
  with pytest.raises(ValueError, match="load_one_shot_runs"):
    omniglot.load_omniglot(odir / "all_runs.zip")


def _pixel_nearest_neighbour(support_x, query_x):
  """The support index nearest to each query in Euclidean pixel distance."""
  d = ((query_x[:, None] - support_x[None]) ** 2).reshape(len(query_x), len(support_x), -1)
  return d.sum(-1).argmin(1)


def test_one_shot_runs_and_error_rate(odir):
  runs = omniglot.load_one_shot_runs(odir / "all_runs.zip")
  assert [r.name for r in runs] == [f"run{i:02d}" for i in range(1, 21)]
  for r in runs:
    assert r.support_x.shape == (20, 28, 28, 1) and r.query_x.shape == (20, 28, 28, 1)
    assert r.support_x.dtype == np.float32 and r.query_y.dtype == np.int32
    np.testing.assert_array_equal(np.sort(r.query_y), np.arange(20))  # one query per class
  # run01/class_labels.txt starts "run01/test/item01.png run01/training/class08.png".
  assert runs[0].query_y[0] == 7 and runs[0].query_y[1] == 8
  # Pixel nearest neighbour: far better than chance (19/20), far from perfect.
  error = omniglot.one_shot_error_rate(_pixel_nearest_neighbour, runs)
  print(f"20-way one-shot error of pixel nearest neighbour at 28x28: {error:.4f}")
  assert 0.0 < error < 0.95
  assert error == pytest.approx(317 / 400, abs=1e-6)  # measured: 0.7925
  # The oracle gets 0, a constant guess the chance rate 19/20.
  truth = {id(r.support_x): r.query_y for r in runs}
  assert omniglot.one_shot_error_rate(lambda s, q: truth[id(s)], runs) == 0.0
  assert omniglot.one_shot_error_rate(
      lambda s, q: np.zeros(len(q), np.int64), runs) == pytest.approx(19 / 20)
  with pytest.raises(ValueError, match="one integer support index per query"):
    omniglot.one_shot_error_rate(lambda s, q: np.zeros(len(q), np.float32), runs)


@pytest.mark.slow  # ~10 s of CPU decoding 32,460 PNGs; 22 s wall on 2 busy cores.
def test_full_omniglot_standard_split_at_28x28_stays_under_2_gb(odir):
  """Both full zips (1,623 characters, 32,460 drawings) at 28x28, split 1,200 / 423 with
  the four rotations as classes (the standard split, configs/omniglot_standard_*): the
  arrays' sizes, and the peak resident memory of a fresh process that loads them
  (measured: 0.82 GB, 0.79 GB of it the load and split) under 2 GB (issue 40). The peak is
  the child's VmHWM: its ``ru_maxrss`` starts at the parent's resident size (Linux carries
  the high-water mark across fork and exec), 3.8 GB under a pytest that has run TensorFlow."""
  import json  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  code = (
      "import json, resource, sys\n"
      "def peak_kb():\n"
      "  try:  # This address space's own high-water mark (Linux).\n"
      "    return int([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])\n"
      "  except (OSError, IndexError):\n"
      "    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
      "from hypernet.data import omniglot\n"
      "before = peak_kb()\n"
      f"train, test = omniglot.split_by_character(['images_background.zip', "
      f"'images_evaluation.zip'], 0, num_test_characters=423, data_dir={str(odir)!r})\n"
      "peak = peak_kb()\n"
      "print(json.dumps(dict(before_kb=before, peak_kb=peak, tf='tensorflow' in sys.modules,\n"
      "  train=[list(train.images.shape), train.images.nbytes, train.num_classes],\n"
      "  test=[list(test.images.shape), test.images.nbytes, test.num_classes])))\n")
  # Decoding the zips, not the disk cache (the larger peak of the two).
  env = dict(os.environ, HYPERNET_CACHE_DIR="")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=env)
  assert out.returncode == 0, out.stderr[-2000:]
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert not got["tf"]  # The loader alone: NumPy and Pillow.
  # 1,200 characters x 4 rotations x 20 drawings x 28 x 28 float32; 423 x 4 x 20 ...
  assert got["train"] == [[96000, 28, 28, 1], 96000 * 784 * 4, 4800]
  assert got["test"] == [[33840, 28, 28, 1], 33840 * 784 * 4, 1692]
  peak_gb, growth_gb = got["peak_kb"] / 2 ** 20, (got["peak_kb"] - got["before_kb"]) / 2 ** 20
  assert peak_gb < 2.0 and growth_gb < 1.5, got
