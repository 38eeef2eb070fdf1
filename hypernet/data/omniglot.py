"""Omniglot, read straight from the zips of Brenden Lake's repository.

Omniglot (Lake, Salakhutdinov & Tenenbaum, "Human-level concept learning through
probabilistic program induction", Science 2015): 1623 handwritten characters from 50
alphabets, 20 drawings each, as 105x105 1-bit PNGs (black strokes on white), in the zips
of https://github.com/brendenlake/omniglot (folder ``python/``). :func:`load_omniglot`
reads the image zips without extracting them (one class per character; float32 in
[0, 1] with ink = 1, 28x28 by default as in Vinyals et al. 2016 and Finn et al. 2017;
decoded zips cached in memory, :func:`clear_cache`, and on disk, :func:`disk_cache_dir`);
:func:`split_by_character` splits by
character with Finn et al.'s 90/180/270-degree rotations after the split;
:func:`load_one_shot_runs` and :func:`one_shot_error_rate` give the official 20-way
one-shot task. Pure numpy + Pillow; :mod:`hypernet.data.episodes` makes the episodes."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import posixpath
import re
import zipfile
import zlib
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
from PIL import Image

PathLike = Union[str, os.PathLike]

OMNIGLOT_URL = "https://github.com/brendenlake/omniglot"
_HOW_TO_GET = (
    f"Get it from the Omniglot repository {OMNIGLOT_URL} (folder python/: "
    "images_background.zip, images_evaluation.zip, images_background_small1.zip, "
    "images_background_small2.zip, one-shot-classification/all_runs.zip), or use the "
    "same zips that TensorFlow Datasets' `omniglot` builder downloads (under "
    "~/tensorflow_datasets/downloads).")

_RESAMPLE = {
    "nearest": Image.Resampling.NEAREST,
    "box": Image.Resampling.BOX,
    "bilinear": Image.Resampling.BILINEAR,
    "lanczos": Image.Resampling.LANCZOS,
}


@dataclasses.dataclass(frozen=True)
class LabelledImages:
  """Class-labelled images.

  Attributes:
    images: [num, image_size, image_size, 1] float32 in [0, 1], ink = 1.
    labels: [num] int32 in [0, num_classes); images are grouped by label, in label order.
    class_names: num_classes names, ``"Alphabet/characterNN"`` (plus ``"/rotDDD"`` for a
      rotated copy); ``class_names[label]`` names the class of ``label``.
  """
  images: np.ndarray
  labels: np.ndarray
  class_names: Tuple[str, ...]

  @property
  def num_classes(self) -> int:
    return len(self.class_names)


class OneShotRun(NamedTuple):
  """One run of the 20-way one-shot classification task of Lake et al. 2015.

  Attributes:
    support_x: [20, S, S, 1] float32, one drawing per class (``training/classNN.png``,
      in file order), ink = 1.
    query_x: [20, S, S, 1] float32, the test drawings (``test/itemNN.png``, in file order).
    query_y: [20] int32, for each query the index into ``support_x`` of its true class
      (from ``class_labels.txt``).
    name: the run's folder in the zip, e.g. ``"run01"``.
  """
  support_x: np.ndarray
  query_x: np.ndarray
  query_y: np.ndarray
  name: str


# (realpath, st_size, st_mtime_ns, image_size, resample)
#   -> {class name: (drawing file names, [20, S, S, 1] float32)}
_CACHE: Dict[tuple, Dict[str, Tuple[Tuple[str, ...], np.ndarray]]] = {}


def clear_cache() -> None:
  """Forgets all decoded zips (they are cached in memory by :func:`load_omniglot`); the
  copies on disk (:func:`disk_cache_dir`) stay."""
  _CACHE.clear()


# The layout of a decoded zip on disk; a change of it (or of _decode) bumps this, so that
# older files are never read.
_DISK_FORMAT = 1


def disk_cache_dir() -> Optional[str]:
  """Where decoded zips are kept between processes: ``$HYPERNET_CACHE_DIR/omniglot``, else
  ``~/.cache/hypernet/omniglot`` (beside the compiled kernels' ``~/.cache/hypernet/kernels``,
  :func:`hypernet.numerics.norm_relu_pool.cache_dir`); ``None`` when
  ``HYPERNET_CACHE_DIR`` is set but empty (no disk cache).

  Decoding the 32,460 PNGs of the full Omniglot takes about 6 s on a CPU core, at every
  run start and every evaluation; the decoded uint8 drawings (25 MB at 28x28) load from
  this folder in a fraction of a second. A file is found by the zip's real path, size
  and modification time, the image size and the resampling filter: a changed zip is
  decoded again. An unwritable or unreadable cache is skipped (logged at debug level),
  never an error. Delete the folder to free the space.
  """
  root = os.environ.get("HYPERNET_CACHE_DIR",
                        os.path.join(os.path.expanduser("~"), ".cache", "hypernet"))
  return os.path.join(root, "omniglot") if root else None


def _disk_path(key: tuple) -> Optional[str]:
  folder = disk_cache_dir()
  if folder is None:
    return None
  digest = hashlib.sha256(repr((_DISK_FORMAT,) + key).encode()).hexdigest()[:24]
  stem = os.path.splitext(os.path.basename(key[0]))[0]
  return os.path.join(folder, f"{stem}-{key[3]}px-{key[4]}-{digest}.npz")


def _read_disk(path: Optional[str]) -> Optional[Dict[str, Tuple[Tuple[str, ...], np.ndarray]]]:
  if path is None or not os.path.isfile(path):
    return None
  try:
    with np.load(path, allow_pickle=False) as f:
      classes, counts = f["classes"].tolist(), f["counts"].tolist()
      drawings, images = f["drawings"].tolist(), f["images"]
    if len(classes) != len(counts) or not sum(counts) == len(drawings) == len(images):
      raise ValueError("inconsistent arrays")
  except Exception as e:  # pylint: disable=broad-except  # Any unreadable file: decode.
    logging.debug("Omniglot disk cache %s unreadable (%s): decoding the zip.", path, e)
    return None
  images.flags.writeable = False
  out, start = {}, 0
  for cls, n in zip(classes, counts):
    out[cls] = (tuple(drawings[start:start + n]), images[start:start + n])
    start += n
  return out


def _write_disk(path: Optional[str],
                classes: Dict[str, Tuple[Tuple[str, ...], np.ndarray]]) -> None:
  if path is None:
    return
  tmp = f"{path}.{os.getpid()}.tmp"
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(tmp, "wb") as f:
      np.savez(f, classes=np.array(list(classes), dtype=str),
               counts=np.array([len(d) for d, _ in classes.values()], np.int64),
               drawings=np.array([n for d, _ in classes.values() for n in d], dtype=str),
               images=np.concatenate([im for _, im in classes.values()]))
    os.replace(tmp, path)  # Atomic: a reader sees the whole file or none.
  except OSError as e:
    logging.debug("Omniglot disk cache %s not written (%s).", path, e)
    try:
      os.remove(tmp)
    except OSError:
      pass


def _check_image_args(image_size, resample) -> None:
  if not isinstance(image_size, (int, np.integer)) or isinstance(image_size, bool) \
      or image_size < 1:
    raise ValueError(f"image_size must be a positive int (pixels per side), got "
                     f"{image_size!r}. Omniglot's drawings are 105x105; 28 is the usual size.")
  if resample not in _RESAMPLE:
    raise ValueError(f"resample must be one of {sorted(_RESAMPLE)}, got {resample!r}.")


def _open_zip(path: PathLike) -> zipfile.ZipFile:
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"Omniglot file {path!r} does not exist. {_HOW_TO_GET}")
  try:
    return zipfile.ZipFile(path)
  except (zipfile.BadZipFile, OSError, EOFError) as e:
    raise ValueError(f"Omniglot file {path!r} is not a readable zip (truncated or corrupt: "
                     f"{e}). Download it again. {_HOW_TO_GET}") from e


def _decode(data: bytes, image_size: int, resample: str) -> np.ndarray:
  """PNG bytes -> [image_size, image_size, 1] uint8 grey levels, paper = 255 (as Pillow
  gives them; :func:`_to_float` makes the float images). The decoded zips are cached in
  this 8-bit form: a quarter of the memory of float32."""
  with Image.open(io.BytesIO(data)) as im:
    im = im.convert("L")  # 1-bit -> 0 (ink) / 255 (paper); resizing "1" would force nearest.
    if im.size != (image_size, image_size):
      im = im.resize((image_size, image_size), _RESAMPLE[resample])
    return np.asarray(im, dtype=np.uint8)[:, :, None]


def _to_float(paper: np.ndarray) -> np.ndarray:
  """uint8 grey levels (paper = 255) -> float32 in [0, 1] with ink = 1."""
  return 1.0 - paper.astype(np.float32) / 255.0


def _read_members(path: PathLike, zf: zipfile.ZipFile, names: Sequence[str], image_size: int,
                  resample: str) -> List[np.ndarray]:
  out = []
  for name in names:
    try:
      out.append(_decode(zf.read(name), image_size, resample))
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as e:
      raise ValueError(
          f"Omniglot file {os.fspath(path)!r} is corrupt: member {name!r} cannot be read "
          f"({e}). Download it again. {_HOW_TO_GET}") from e
  return out


def _load_zip(path: PathLike, image_size: int,
              resample: str) -> Dict[str, Tuple[Tuple[str, ...], np.ndarray]]:
  """Returns ``{"Alphabet/characterNN": (drawing names, [20, S, S, 1] uint8)}``, cached
  (grey levels as :func:`_decode` gives them)."""
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"Omniglot file {path!r} does not exist. {_HOW_TO_GET}")
  st = os.stat(path)
  key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, int(image_size), resample)
  if key in _CACHE:
    return _CACHE[key]
  disk = _disk_path(key)
  classes = _read_disk(disk)
  if classes is not None:
    _CACHE[key] = classes
    return classes
  with _open_zip(path) as zf:
    by_class: Dict[str, List[str]] = {}
    for name in zf.namelist():
      parts = name.split("/")
      if len(parts) != 4 or not parts[3].lower().endswith(".png") or parts[0] == "__MACOSX":
        continue
      by_class.setdefault(f"{parts[1]}/{parts[2]}", []).append(name)
    if not by_class:
      raise ValueError(
          f"Omniglot file {path!r} holds no drawings in the layout "
          f"<zip stem>/<Alphabet>/<characterNN>/<drawing>.png (is it all_runs.zip? Use "
          f"load_one_shot_runs for that). {_HOW_TO_GET}")
    classes = {}
    for cls in sorted(by_class):
      members = sorted(by_class[cls])
      images = np.stack(_read_members(path, zf, members, image_size, resample))
      images.flags.writeable = False  # Shared by every caller; load_omniglot copies.
      classes[cls] = (tuple(posixpath.basename(m) for m in members), images)
  _CACHE[key] = classes
  _write_disk(disk, classes)
  return classes


def _as_paths(zip_paths, data_dir: Optional[PathLike]) -> List[str]:
  if isinstance(zip_paths, (str, os.PathLike)):
    zip_paths = [zip_paths]
  paths = [os.fspath(p) for p in zip_paths]
  if not paths:
    raise ValueError("zip_paths is empty: give at least one Omniglot image zip, e.g. "
                     "images_background.zip.")
  if data_dir is not None:
    paths = [os.path.join(os.fspath(data_dir), p) for p in paths]
  return paths


def load_omniglot(zip_paths: Union[PathLike, Sequence[PathLike]], *,
                  data_dir: Optional[PathLike] = None, image_size: int = 28,
                  resample: str = "box") -> LabelledImages:
  """Reads Omniglot image zips into class-labelled arrays, one class per character.

  Args:
    zip_paths: one path or a list of paths of Omniglot image zips in the upstream layout
      ``<zip stem>/<Alphabet>/<characterNN>/<drawing>.png`` (``images_background.zip``,
      ``images_evaluation.zip``, ``images_background_small1.zip``, ...).
    data_dir: if given, ``zip_paths`` are file names relative to this folder.
    image_size: side of the output images in pixels (105 keeps the original size).
    resample: Pillow filter for 105 -> ``image_size``: ``"box"`` (area average, default,
      grey levels), ``"lanczos"``, ``"bilinear"`` or ``"nearest"`` (binary images, what
      Pillow does when resizing the 1-bit PNGs directly, as in Finn et al.'s preprocessing).

  Returns:
    :class:`LabelledImages`: images [num, image_size, image_size, 1] float32 in [0, 1]
    with ink = 1, labels [num] int32, class names ``"Alphabet/characterNN"`` sorted, so
    the labelling does not depend on the order of ``zip_paths``. A character found in
    several zips with the same drawings is taken once: the union of the characters.
    (``images_background_small1.zip`` and ``..._small2.zip`` share the Greek and Latin
    alphabets: 5,840 drawings, 242 distinct characters, 4,840 distinct drawings.)

  Raises:
    FileNotFoundError: a zip is missing (the message says where to get it).
    ValueError: a zip is truncated or corrupt or has no drawings in the expected layout;
      two zips hold the same character with different drawings; bad ``image_size`` or
      ``resample``.
  """
  _check_image_args(image_size, resample)
  classes: Dict[str, np.ndarray] = {}
  origin: Dict[str, Tuple[str, Tuple[str, ...]]] = {}
  for path in _as_paths(zip_paths, data_dir):
    for cls, (drawings, images) in _load_zip(path, image_size, resample).items():
      if cls in classes:
        first_path, first_drawings = origin[cls]
        if first_drawings != drawings or not np.array_equal(classes[cls], images):
          raise ValueError(
              f"Character {cls!r} is in both {first_path!r} and {path!r} with different "
              "drawings: these zips are not from the same Omniglot release. Pass zips of "
              "one release (images_background_small1/2 are subsets of images_background).")
        continue
      classes[cls] = images
      origin[cls] = (path, drawings)
  names = tuple(sorted(classes))
  images = _to_float(np.concatenate([classes[c] for c in names]))
  labels = np.repeat(np.arange(len(names), dtype=np.int32),
                     [len(classes[c]) for c in names])
  return LabelledImages(images=images, labels=labels, class_names=names)


def _subset(data: LabelledImages, class_ids: np.ndarray) -> LabelledImages:
  """The classes ``class_ids`` (sorted) of ``data``, relabelled 0..len-1."""
  class_ids = np.sort(np.asarray(class_ids))
  new_label = np.full(data.num_classes, -1, np.int64)
  new_label[class_ids] = np.arange(len(class_ids))
  keep = new_label[data.labels] >= 0
  return LabelledImages(images=data.images[keep],
                        labels=new_label[data.labels[keep]].astype(np.int32),
                        class_names=tuple(data.class_names[i] for i in class_ids))


def alphabet_groups(class_names: Sequence[str]) -> np.ndarray:
  """Group ids of classes by alphabet (and rotation): for within-alphabet episodes.

  Args:
    class_names: names ``"Alphabet/characterNN"`` (:func:`load_omniglot`), optionally
      ``"/rot<angle>"`` appended (:func:`rotate_classes`): a rotated alphabet is a group
      of its own.

  Returns:
    ``[len(class_names)]`` int32, equal for the classes of one alphabet and rotation,
    numbered in sorted order of ``(alphabet, rotation)``.
  """
  keys = []
  for name in class_names:
    parts = str(name).split("/")
    rot = parts[-1] if len(parts) > 2 and parts[-1].startswith("rot") else "rot0"
    keys.append(parts[0] + "/" + rot)
  _, ids = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
  return ids.astype(np.int32)


def rotate_classes(data: LabelledImages,
                   rotations: Sequence[int] = (0, 90, 180, 270)) -> LabelledImages:
  """Augments classes with rotated copies, each rotation a new class (Finn et al. 2017).

  Santoro et al. 2016 and Finn et al. 2017 (Sec. 5.2) enlarge Omniglot's set of classes
  with rotations by multiples of 90 degrees; a rotated character is a different class.

  Args:
    data: square images [num, S, S, C].
    rotations: counter-clockwise angles in degrees, distinct multiples of 90. Include 0
      to keep the originals.

  Returns:
    :class:`LabelledImages` with ``len(rotations) * num_classes`` classes: class
    ``c * len(rotations) + r`` is class ``c`` rotated by ``rotations[r]``, named
    ``"<name>/rot<angle>"``.

  Raises:
    ValueError: an angle is not a multiple of 90 or repeats (modulo 360), or no angle.
  """
  rotations = [int(r) for r in rotations]
  if not rotations or any(r % 90 for r in rotations) or \
      len({r % 360 for r in rotations}) != len(rotations):
    raise ValueError(f"rotations must be distinct multiples of 90 degrees (mod 360), got "
                     f"{rotations}; e.g. (0, 90, 180, 270).")
  num_rot = len(rotations)
  rotated = np.stack([np.rot90(data.images, k=(r // 90) % 4, axes=(1, 2))
                      for r in rotations], axis=1)  # [num, R, S, S, C]
  labels = (data.labels.astype(np.int64)[:, None] * num_rot + np.arange(num_rot)[None, :])
  order = np.argsort(labels.reshape(-1), kind="stable")  # group by new class
  names = tuple(f"{name}/rot{r % 360}" for name in data.class_names for r in rotations)
  return LabelledImages(
      images=np.ascontiguousarray(rotated.reshape((-1,) + data.images.shape[1:])[order]),
      labels=labels.reshape(-1)[order].astype(np.int32), class_names=names)


def split_by_character(source: Union[LabelledImages, PathLike, Sequence[PathLike]],
                       seed: int, *, num_test_characters: Optional[int] = None,
                       test_fraction: Optional[float] = None,
                       rotations: Optional[Sequence[int]] = (0, 90, 180, 270),
                       data_dir: Optional[PathLike] = None, image_size: int = 28,
                       resample: str = "box") -> Tuple[LabelledImages, LabelledImages]:
  """Splits Omniglot into train/test sets with no character in both.

  The test characters are a uniformly random subset of the characters, drawn by
  ``numpy.random.default_rng(seed)`` from the *sorted* character names, so the split
  depends only on the set of characters and ``seed`` (not on the order of the zips).
  Rotated copies (:func:`rotate_classes`) are made *after* the split, so a rotation of a
  test character never lands in train. Finn et al. 2017 use 1200 of the 1623 characters
  of ``images_background.zip`` + ``images_evaluation.zip`` for meta-training with
  rotations (0, 90, 180, 270): ``num_test_characters=423``.

  Args:
    source: loaded :class:`LabelledImages` (one class per character), or zip path(s) for
      :func:`load_omniglot`.
    seed: the seed of the split (an int).
    num_test_characters: how many characters go to test; or
    test_fraction: the fraction of characters that go to test (rounded). Give exactly one.
    rotations: angles of :func:`rotate_classes` applied to both sides; ``None`` or
      ``(0,)`` for no augmentation.
    data_dir, image_size, resample: passed to :func:`load_omniglot` when ``source`` is
      paths.

  Returns:
    ``(train, test)`` :class:`LabelledImages`, each labelled 0..num_classes-1.

  Raises:
    ValueError: neither or both of ``num_test_characters`` / ``test_fraction``, or a split
      leaving train or test empty; the errors of :func:`load_omniglot`.
  """
  if isinstance(source, LabelledImages):
    data = source
  else:
    data = load_omniglot(source, data_dir=data_dir, image_size=image_size, resample=resample)
  num_chars = data.num_classes
  if (num_test_characters is None) == (test_fraction is None):
    raise ValueError("Give exactly one of num_test_characters (an int) or test_fraction (in "
                     f"(0, 1)); got num_test_characters={num_test_characters!r}, "
                     f"test_fraction={test_fraction!r}.")
  if test_fraction is not None:
    if not 0.0 < float(test_fraction) < 1.0:
      raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}.")
    num_test_characters = int(round(float(test_fraction) * num_chars))
  if not 1 <= num_test_characters <= num_chars - 1:
    raise ValueError(
        f"num_test_characters={num_test_characters} (from test_fraction={test_fraction!r}) "
        f"leaves train or test empty: there are {num_chars} characters; pick 1.."
        f"{num_chars - 1}.")
  order = np.argsort(np.asarray(data.class_names, dtype=object), kind="stable")
  perm = np.random.default_rng(seed).permutation(num_chars)
  test_ids = order[perm[:num_test_characters]]
  train_ids = np.setdiff1d(np.arange(num_chars), test_ids)
  train, test = _subset(data, train_ids), _subset(data, test_ids)
  if rotations is not None and tuple(rotations) != (0,):
    train, test = rotate_classes(train, rotations), rotate_classes(test, rotations)
  return train, test


_RUN_LINE = re.compile(r"^\s*(\S+)\s+(\S+)\s*$")


def load_one_shot_runs(zip_path: PathLike, *, image_size: int = 28,
                       resample: str = "box") -> List[OneShotRun]:
  """Reads the official 20-way one-shot classification runs (Lake et al. 2015).

  ``all_runs.zip`` holds folders ``runNN/`` with ``training/classNN.png`` (20 drawings,
  one per class), ``test/itemNN.png`` (20 drawings, one per class, by other drawers) and
  ``class_labels.txt`` with lines ``runNN/test/itemXX.png runNN/training/classYY.png``.

  Args:
    zip_path: path of ``all_runs.zip``.
    image_size, resample: as in :func:`load_omniglot`; the same preprocessing (float32 in
      [0, 1], ink = 1).

  Returns:
    The runs sorted by name (20 for the official file), as :class:`OneShotRun`.

  Raises:
    FileNotFoundError: the zip is missing.
    ValueError: the zip is truncated or corrupt, or not in the layout above.
  """
  _check_image_args(image_size, resample)
  path = os.fspath(zip_path)
  runs = []
  with _open_zip(path) as zf:
    names = set(zf.namelist())
    label_files = sorted(n for n in names if posixpath.basename(n) == "class_labels.txt")
    if not label_files:
      raise ValueError(f"{path!r} holds no runNN/class_labels.txt: it is not all_runs.zip of "
                       f"the one-shot classification task. {_HOW_TO_GET}")
    for label_file in label_files:
      run_dir = posixpath.dirname(label_file)
      prefix = posixpath.dirname(run_dir)  # "" or a top folder the zip was made with
      join = lambda rel: posixpath.join(prefix, rel) if prefix else rel
      try:
        text = zf.read(label_file).decode("utf-8")
      except (zipfile.BadZipFile, zlib.error, OSError) as e:
        raise ValueError(f"Omniglot file {path!r} is corrupt: {label_file!r} cannot be read "
                         f"({e}). Download it again. {_HOW_TO_GET}") from e
      pairs = []
      for line in text.splitlines():
        if not line.strip():
          continue
        m = _RUN_LINE.match(line)
        if not m:
          raise ValueError(f"{path!r}: unexpected line {line!r} in {label_file!r}; expected "
                           "'runNN/test/itemXX.png runNN/training/classYY.png'.")
        pairs.append((join(m.group(1)), join(m.group(2))))
      support_files = sorted(n for n in names if n.startswith(run_dir + "/training/")
                             and n.lower().endswith(".png"))
      query_files = sorted(q for q, _ in pairs)
      pair = dict(pairs)
      missing = [f for f in query_files + list(pair.values())
                 if f not in names]
      if missing or len(pair) != len(pairs):
        raise ValueError(f"{path!r}: {label_file!r} names files that are missing or "
                         f"repeated: {missing[:3]}. {_HOW_TO_GET}")
      index = {f: i for i, f in enumerate(support_files)}
      runs.append(OneShotRun(
          support_x=_to_float(np.stack(_read_members(path, zf, support_files, image_size,
                                                     resample))),
          query_x=_to_float(np.stack(_read_members(path, zf, query_files, image_size,
                                                   resample))),
          query_y=np.array([index[pair[q]] for q in query_files], np.int32),
          name=posixpath.basename(run_dir)))
  return runs


def one_shot_error_rate(classify_fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
                        runs: Sequence[OneShotRun]) -> float:
  """The error rate of a one-shot classifier over the runs (Lake et al. 2015, Fig. 6).

  Args:
    classify_fn: ``classify_fn(support_x, query_x) -> predictions``: support_x [20, S, S, 1]
      and query_x [20, S, S, 1] float32 numpy arrays of one run; returns for each query
      the index into ``support_x`` of its predicted class, [20] ints (numpy or tf).
    runs: from :func:`load_one_shot_runs`.

  Returns:
    The fraction of misclassified queries over all runs (a float in [0, 1]; every run has
    20 queries, so this is also the mean of the per-run error rates). Chance is 19/20.
    Lake et al. report it in percent (humans 4.5%).

  Raises:
    ValueError: no runs, or ``classify_fn`` returns the wrong shape or a non-integer dtype.
  """
  if not runs:
    raise ValueError("runs is empty: load them with load_one_shot_runs('all_runs.zip').")
  errors = total = 0
  for run in runs:
    pred = np.asarray(classify_fn(run.support_x, run.query_x))
    if pred.shape != run.query_y.shape or not np.issubdtype(pred.dtype, np.integer):
      raise ValueError(
          f"classify_fn must return one integer support index per query, shape "
          f"{run.query_y.shape}; got shape {pred.shape} dtype {pred.dtype} on {run.name}. "
          "Return e.g. argmin of distances over the support axis.")
    errors += int(np.sum(pred != run.query_y))
    total += run.query_y.size
  return errors / total
