r"""The compiled margin-model step (optional): built with the machine's C compiler, cached,
checked, loaded, and never required.

The engine's hottest loop, one gradient of an attention model with a bilinear score
:math:`a_{it} = x_{it}^\top W z_i` and a fixed linear head, is two passes over the tokens
(:meth:`attnsvm.models.AttentionClassifier.grad`). In eager torch each pass is a dozen small
operations over (B, n, T) blocks and batched products of tiny matrices, whose per-call and
per-item overheads, not the arithmetic or the memory traffic, set the time. The C source
``csrc/margin_step.c`` fuses each pass into one loop over the sequences:

* :func:`jacobian_terms`: the scores, the top token, :math:`a_{(2)}` and the rescaled
  probabilities :math:`\hat s_t` with their sums, i.e. the token loop of
  :func:`attnsvm.models.attention.softmax_jacobian`;
* :func:`weighted_grad`: :math:`q_{it}` from those terms and the per-sequence coefficient, then
  :math:`\tilde\nabla_W = \sum_i (X_i^\top q_i) z_i^\top`.

The per-sequence log-space scalars (``log1p``, the loss) stay in torch, shared with the
eager path. The results agree with the eager path to rounding (tests/test_compiled.py).

Building. On first use for a shape (T tokens of dimension d) the source is compiled with
``$CC`` (default ``cc``) and ``-O3 -march=native -ffp-contract=fast`` (``-O3`` alone if the
compiler refuses them), the shape given as compile-time constants (every token and feature
loop of known length), into ``$ATTNSVM_CACHE/compiled`` (default ``$XDG_CACHE_HOME/attnsvm``
or ``~/.cache/attnsvm``), under a name that gives the shape and hashes the source, the
compiler's version, the flags and the CPU's feature flags. Each library has a sidecar with
the SHA-256 of its bytes: a library that is missing, is truncated, does not match its sidecar
or does not load is rebuilt (once); the compiled file reaches its final name by an atomic
rename, after its checksum, so concurrent processes never load a partial file. If no library
can be built or loaded, one warning says why and the engine runs its eager torch path: same
results to rounding, slower.

``ATTNSVM_COMPILED=0`` turns the compiled path off (``status()`` says which path is used).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

__all__ = ["ENV", "CACHE_ENV", "SOURCE", "CompiledUnavailable", "library", "status",
           "applicable", "jacobian_terms", "weighted_grad", "jacobian_terms_kq",
           "weighted_grad_kq", "workspace", "reset"]

#: set to "0" to turn the compiled path off
ENV = "ATTNSVM_COMPILED"
#: the cache directory (default: $XDG_CACHE_HOME/attnsvm or ~/.cache/attnsvm)
CACHE_ENV = "ATTNSVM_CACHE"
#: the C source of the compiled step
SOURCE = Path(__file__).with_name("csrc") / "margin_step.c"
MAX_D = 256          # the feature dimensions d and m
MAX_T = 65536
MAX_WORK = 16777216  # doubles of one call's scratch (heap): d * max(d, m) + n * (T + d + m + 2)

# -ffp-contract=fast: multiply-adds fused where the CPU has FMA (one rounding instead of two)
_FLAGS = (("-O3", "-march=native", "-ffp-contract=fast"), ("-O3",))
_BASE = ("-fPIC", "-shared", "-fno-math-errno", "-std=c99")
_lock = threading.Lock()
_state = {"libs": {}, "why": {}, "paths": {}, "pool": None, "pool_n": 0}


def _after_fork_in_child():
    # a forked child inherits the executor object but none of its threads, and perhaps a held lock
    global _lock
    _lock = threading.Lock()
    _state["pool"], _state["pool_n"] = None, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class CompiledUnavailable(RuntimeError):
    """The compiled step cannot be built or loaded; the message says why."""


def cache_dir() -> Path:
    """Where compiled libraries are kept."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = Path(xdg) / "attnsvm" if xdg else Path.home() / ".cache" / "attnsvm"
    return Path(root) / "compiled"


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor()


def _compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompiledUnavailable(f"no C compiler: {cc!r} ({exc}); set $CC") from None
    if out.returncode != 0:
        raise CompiledUnavailable(f"C compiler {cc!r} --version exited {out.returncode}")
    return out.stdout


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _atomic_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _compile(cc: str, flags, out: Path) -> None:
    """Compile :data:`SOURCE` to ``out`` (through a temporary file and an atomic rename)."""
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".tmp-", suffix=".so")
    os.close(fd)
    try:
        res = subprocess.run([cc, *flags, *_BASE, "-o", tmp, str(SOURCE), "-lm"],
                             capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            raise CompiledUnavailable(f"{cc} {' '.join(flags)} failed on {SOURCE}: "
                                      f"{res.stderr.strip()[-500:]}")
        # the checksum first, then the library: a reader never finds a library without its
        # checksum (concurrent builders of one shape write the same bytes)
        _atomic_text(out.with_suffix(".sha256"), _sha(Path(tmp)) + "\n")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _clean_temporaries(where: Path, age: float = 3600.0) -> None:
    """Remove temporaries of builds that died (``.tmp-*`` older than ``age`` seconds)."""
    now = time.time()
    for f in where.glob(".tmp-*"):
        try:
            if now - f.stat().st_mtime > age:
                f.unlink()
        except OSError:
            pass


def _valid(so: Path) -> str | None:
    """Why the cached library ``so`` cannot be used as it is (None: it can)."""
    side = so.with_suffix(".sha256")
    if not so.is_file():
        return "not built yet"
    try:
        want = side.read_text().strip()
    except OSError:
        return "its checksum file is missing"
    try:
        have = _sha(so)
    except OSError as exc:
        return f"unreadable ({exc})"
    return None if have == want else "its bytes do not match the recorded SHA-256"


def _load(so: Path):
    lib = ctypes.CDLL(str(so))
    i64, p = ctypes.c_int64, ctypes.c_void_p
    lib.jacobian_terms.argtypes = [i64] * 5 + [p] * 11
    lib.jacobian_terms.restype = ctypes.c_int
    lib.weighted_grad.argtypes = [i64] * 5 + [p] * 12
    lib.weighted_grad.restype = ctypes.c_int
    lib.jacobian_terms_kq.argtypes = [i64] * 6 + [p] * 13
    lib.jacobian_terms_kq.restype = ctypes.c_int
    lib.weighted_grad_kq.argtypes = [i64] * 6 + [p] * 15
    lib.weighted_grad_kq.restype = ctypes.c_int
    return lib


def _build_or_load(T, d, m, log=None):
    src = SOURCE.read_bytes()
    cc = os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        raise CompiledUnavailable(f"no C compiler found: {cc!r} is not on PATH (set $CC)")
    version = _compiler_version(cc)
    where = cache_dir()
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CompiledUnavailable(f"cannot create the cache directory {where}: {exc}") from None
    _clean_temporaries(where)
    errors = []
    for flags in _FLAGS:
        flags = flags + (f"-DFIX_T={int(T)}", f"-DFIX_D={int(d)}", f"-DFIX_M={int(m)}")
        key = hashlib.sha256(b"\0".join([src, version.encode(), " ".join(flags + _BASE).encode(),
                                         platform.machine().encode(),
                                         _cpu_flags().encode()])).hexdigest()[:20]
        so = where / f"margin_step-T{T}-d{d}-m{m}-{key}.so"
        why = _valid(so)
        if why is not None and why != "not built yet" and log:
            log(f"compiled step {so.name}: {why}, rebuilding")
        for attempt in range(2):
            built = False
            try:
                if _valid(so) is not None:
                    _compile(cc, flags, so)
                    built = True
                lib = _load(so)
                _state["paths"][(T, d, m)] = so
                return lib
            except OSError as exc:        # a library that does not load: rebuild it once
                errors.append(f"{so}: {exc}")
                if built or attempt == 1:
                    break                 # a fresh build that does not load: no second try
                for f in (so, so.with_suffix(".sha256")):
                    f.unlink(missing_ok=True)
            except CompiledUnavailable as exc:
                errors.append(str(exc))
                break
    raise CompiledUnavailable("; ".join(errors))


def _disabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off")


def library(T, d, m=0):
    """The loaded library for ``T`` tokens of dimension ``d`` (and inner dimension ``m`` of
    ``K``, ``Q``; 0 for ``W``), or None (then :func:`status` says why; warns once per shape)."""
    if _disabled():
        return None
    key = (int(T), int(d), int(m))
    libs = _state["libs"]
    if key in libs:
        return libs[key]
    with _lock:
        if key not in libs:
            try:
                libs[key] = _build_or_load(*key, log=lambda m: warnings.warn(m, stacklevel=4))
            except Exception as exc:  # noqa: BLE001 (any failure to build or load: eager path)
                libs[key] = None
                _state["why"][key] = str(exc)
                warnings.warn(f"attnsvm: the compiled step is unavailable for T={T}, d={d}, m={m}, "
                              f"using the eager torch path ({exc})", RuntimeWarning, stacklevel=4)
    return libs[key]


def reset() -> None:
    """Forget the loaded libraries (the next use builds or loads them again)."""
    with _lock:
        _state["libs"].clear()
        _state["why"].clear()
        _state["paths"].clear()


def status(T=8, d=10, m=0) -> dict:
    """For the shape ``(T, d, m)``: ``{"enabled": bool, "path": library file or None, "why":
    the reason it is off, or None}`` (building the library if needed)."""
    if _disabled():
        return {"enabled": False, "path": None, "why": f"${ENV}={os.environ[ENV]}"}
    lib = library(T, d, m)
    key = (int(T), int(d), int(m))
    return {"enabled": lib is not None,
            "path": None if lib is None else str(_state["paths"].get(key)),
            "why": _state["why"].get(key)}


def applicable(*tensors, T: int, d: int, m: int = 0, n: int = 1) -> bool:
    """Whether the compiled step can serve these tensors: float64, on the CPU, contiguous,
    ``2 <= T <= 65536``, ``1 <= d <= 256``, ``m <= 256``, ``n >= 1``, a scratch of
    ``d max(d, m) + n (T + d + m + 2)`` doubles at most 2^24, and the library loads. The caller
    checks that the tensors' shapes fit together (:meth:`attnsvm.models.AttentionClassifier.grad`
    does)."""
    if not (2 <= T <= MAX_T and 1 <= d <= MAX_D and 0 <= m <= MAX_D and n >= 1
            and d * max(d, m) + n * (T + d + m + 2) <= MAX_WORK):
        return False
    for t in tensors:
        if t.dtype != torch.float64 or t.device.type != "cpu" or not t.is_contiguous():
            return False
    return library(T, d, m) is not None


def _need(T, d, m=0):
    lib = library(T, d, m)
    if lib is None:
        raise CompiledUnavailable(f"the compiled step is off or unavailable for T={T}, d={d}, "
                                  f"m={m} ({status(T, d, m)['why']}); use the eager path")
    return lib


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


def _split(fn, B, *args):
    """Run ``fn(b0, b1, *args)`` over the trials, split between torch's thread count (the
    library call releases the GIL)."""
    nt = torch.get_num_threads()
    if nt <= 1 or B < 2 * nt:
        rc = fn(0, B, *args)
        if rc:
            raise CompiledUnavailable(f"compiled step refused its shapes (code {rc})")
        return
    with _lock:
        pool = _state["pool"]
        if pool is None or _state["pool_n"] != nt:
            if pool is not None:
                pool.shutdown(wait=False)
            pool = _state["pool"] = ThreadPoolExecutor(nt, thread_name_prefix="attnsvm-compiled")
            _state["pool_n"] = nt
    bounds = [B * k // nt for k in range(nt + 1)]
    rcs = list(pool.map(lambda k: fn(bounds[k], bounds[k + 1], *args), range(nt)))
    if any(rcs):
        raise CompiledUnavailable(f"compiled step refused its shapes (codes {rcs})")


def jacobian_terms(Xt, Z, W, G, out=None):
    r"""The token loop of the softmax Jacobian, compiled.

    Parameters
    ----------
    Xt : Tensor (B, n, d, T)
        The tokens, transposed and contiguous.
    Z : Tensor (B, n, d)
        The queries :math:`z_i`.
    W : Tensor (B, d, d)
    G : Tensor (B, n, T)
        The token values :math:`g_{it}`.
    out : tuple, optional
        Tensors of the returned shapes and dtypes to write into (a caller's workspace);
        default: new tensors.

    Returns
    -------
    sh : (B, n, T)
        :math:`\hat s_t = e^{a_t - a_{(2)}}`, 0 at the top token.
    top : (B, n) int64
        The top token (first largest score).
    Ssh, shG, gap, G_top, e_gap : (B, n)
        :math:`\sum_t \hat s_t`, :math:`\sum_t \hat s_t g_t`, :math:`a_{(2)} - a_{t^\star}`,
        :math:`g_{t^\star}`, :math:`e^{a_{(2)} - a_{t^\star}}`.
    """
    B, n, d, T = Xt.shape
    lib = _need(T, d)
    if out is None:
        out = workspace(B, n, T)
    sh, top, Ssh, shG, gap, G_top, e_gap = out
    _split(lib.jacobian_terms, B, n, T, d, _ptr(Xt), _ptr(Z), _ptr(W), _ptr(G), _ptr(sh),
           _ptr(top), _ptr(Ssh), _ptr(shG), _ptr(gap), _ptr(G_top), _ptr(e_gap))
    return out


def workspace(B, n, T):
    """New output tensors for :func:`jacobian_terms`: ``sh`` (B,n,T), ``top`` (B,n) int64 and
    five (B,n)."""
    kw = dict(dtype=torch.float64)
    return (torch.empty((B, n, T), **kw), torch.empty((B, n), dtype=torch.int64),
            *(torch.empty((B, n), **kw) for _ in range(5)))


def weighted_grad(X, Z, G, terms, f, s_top, c):
    r""":math:`\tilde\nabla_W = \sum_i (X_i^\top q_i) z_i^\top` (B, d, d), compiled, with
    :math:`q_{it} = c_i \hat s_t (g_t - f_i)` (:math:`t \ne t^\star`) and
    :math:`q_{it^\star} = c_i s_{t^\star}(g_{t^\star}\sum_\tau \hat s_\tau - \sum_\tau \hat s_\tau g_\tau)`;
    ``terms`` are the tensors :func:`jacobian_terms` returns; ``f``, ``s_top``, ``c`` (B, n)."""
    sh, top, Ssh, shG, _, G_top, _ = terms
    B, n, T, d = X.shape
    lib = _need(T, d)
    f, s_top, c = (t.contiguous() for t in (f, s_top, c))
    gW = torch.empty((B, d, d), dtype=torch.float64)
    _split(lib.weighted_grad, B, n, T, d, _ptr(X), _ptr(Z), _ptr(G), _ptr(sh), _ptr(top),
           _ptr(Ssh), _ptr(shG), _ptr(G_top), _ptr(f), _ptr(s_top), _ptr(c), _ptr(gW))
    return gW


def jacobian_terms_kq(Xt, Z, K, Q, G, out=None):
    r""":func:`jacobian_terms` for :math:`W = K Q^\top` (``K``, ``Q`` (B, d, m)), without
    forming ``W``: :math:`W z_i = K (Q^\top z_i)`. Returns the same seven tensors and
    :math:`Q^\top z_i` (B, n, m), which :func:`weighted_grad_kq` reuses."""
    B, n, d, T = Xt.shape
    m = K.shape[-1]
    lib = _need(T, d, m)
    if out is None:
        out = workspace(B, n, T)
    Qz = torch.empty((B, n, m), dtype=torch.float64)
    sh, top, Ssh, shG, gap, G_top, e_gap = out
    _split(lib.jacobian_terms_kq, B, n, T, d, m, _ptr(Xt), _ptr(Z), _ptr(K), _ptr(Q), _ptr(G),
           _ptr(sh), _ptr(top), _ptr(Ssh), _ptr(shG), _ptr(gap), _ptr(G_top), _ptr(e_gap),
           _ptr(Qz))
    return (*out, Qz)


def weighted_grad_kq(X, Z, G, terms, f, s_top, c, Qz, K):
    r"""The (K, Q) gradients without forming :math:`\tilde\nabla_W`:
    :math:`\tilde\nabla_K = \sum_i \bar x_i (Q^\top z_i)^\top`,
    :math:`\tilde\nabla_Q = \sum_i z_i (K^\top \bar x_i)^\top` (each (B, d, m)), with
    :math:`\bar x_i = X_i^\top q_i` as in :func:`weighted_grad`."""
    sh, top, Ssh, shG, _, G_top, _ = terms
    B, n, T, d = X.shape
    m = K.shape[-1]
    lib = _need(T, d, m)
    f, s_top, c = (t.contiguous() for t in (f, s_top, c))
    gK = torch.empty((B, d, m), dtype=torch.float64)
    gQ = torch.empty((B, d, m), dtype=torch.float64)
    _split(lib.weighted_grad_kq, B, n, T, d, m, _ptr(X), _ptr(Z), _ptr(G), _ptr(sh), _ptr(top),
           _ptr(Ssh), _ptr(shG), _ptr(G_top), _ptr(f), _ptr(s_top), _ptr(c), _ptr(Qz), _ptr(K),
           _ptr(gK), _ptr(gQ))
    return gK, gQ
