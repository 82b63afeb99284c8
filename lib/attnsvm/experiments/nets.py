r"""The stochastic training of the networks of Chapter 12 (:mod:`attnsvm.models.nets`: a small
ViT and a pretrained MiniLM text classifier; the joint training of attention and head,
Chapter 11, is :mod:`attnsvm.experiments.joint`).

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
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..datasets import load_image_dataset, load_text_dataset
from ..models.nets import TextClassifier, ViT, attention_stats, encode_frozen, load_minilm
from ..optim import STOCHASTIC, make_optimizer
from ..devices import resolve_device
from ..history import record_grid

__all__ = ["TorchHistory", "train_torch", "compare_optimizers", "OptimizerComparison", "STOCHASTIC"]


# ============================================================================= training
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
            knob = (f"cap the Polyak step with eta_max (now {eta_max})" if optimizer == "sps"
                    else f"try a smaller lr (now {lr:g})")
            raise FloatingPointError(f"{optimizer}: the loss became {float(loss)} at step {k}; "
                                     f"{knob}")
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
