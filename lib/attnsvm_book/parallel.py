"""Executing notebooks as Dask tasks (the build's ``--workers``/``--scheduler``, and sweeps).

One *job* is one papermill execution, described by a plain dict (picklable, so that it travels
to any worker): the notebook, its parameters, where the executed copy goes on success
(``out_path``, written atomically) and on failure (``failed_path``), the kernel, and how many
BLAS/torch threads the kernel may use. :func:`run_job` executes it where it lands and returns a
plain dict: status, seconds, the device it ran on, the worker, and the error (notebook, cell,
exception) when it failed. Failures are returned, not raised, so that the other jobs finish.

:func:`run_jobs` runs a list of jobs in-process one after another (``workers=1`` without a
scheduler: the serial build) or on Dask: a ``distributed.LocalCluster`` of ``workers`` processes
with one thread each, or an existing cluster at ``scheduler`` (``tcp://host:8786``). Results are
handed to ``on_result`` as each job finishes, so that its cache record is written at once and a
failure elsewhere never loses it.

A worker's kernel gets ``OMP_NUM_THREADS`` (and the MKL/OpenBLAS/NumExpr/BLIS/Accelerate
equivalents, which torch and numpy read at start-up) set to ``threads``: N workers on a machine
then use about its cores, instead of N times its cores. On a cluster the jobs read and write the
book's paths, so the workers must see the same file system and have ``attnsvm`` importable.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path

from ._core import (KERNEL_START_RETRIES, _describe_failure, _device_label, _execute_one,
                    kernel_start_failed, missing_data, resolve_device)

__all__ = ["THREAD_VARIABLES", "default_workers", "threads_per_worker", "make_job", "run_job",
           "run_jobs", "dask_client", "Progress", "parse_resources", "device_resolver",
           "gpu_count", "worker_plan", "GPU_PER_CARD_ENV", "engine_summary"]

#: GPU workers per card of the local cluster (default 1; more only where measured to help,
#: e.g. under CUDA MPS)
GPU_PER_CARD_ENV = "ATTNSVM_GPU_WORKERS_PER_CARD"

#: environment variables that cap the threads of BLAS libraries and torch in a kernel
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")

#: environment variables a kernel gets from the process that schedules the build, not from the
#: Dask worker that starts it: a worker's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536`` (Dask's
#: default ``distributed.nanny.pre-spawn-environ``, to hand a worker's freed memory back to the
#: system), and a kernel that inherits it has glibc give back and fault in again the pages of
#: torch's temporaries at every step: measured on chapter 9 at its paper shape (5,000 steps,
#: papermill, 1 thread), 1:50 wall with 45 s system time and 30.5 M page faults, against 0:55,
#: 2 s and 0.37 M with glibc's default (the build's paper run of 2026-11-28 had about half its
#: kernels' CPU time in the system)
KERNEL_ENVIRON = ("MALLOC_TRIM_THRESHOLD_",)

_ENV_LOCK = threading.RLock()    # re-entered: the thread caps and the engine log nest


def default_workers() -> int:
    """The default number of local workers: the number of cores."""
    return max(1, os.cpu_count() or 1)


def gpu_count() -> int:
    """The CUDA cards this machine's workers can use (0 without torch or CUDA)."""
    try:
        import torch  # deferred: the build imports torch only when it schedules devices
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def worker_plan(workers: int, gpus: int, per_card: int | None = None) -> list[dict]:
    """The workers of a local cluster: ``[{"name", "resources", "env"}, ...]``.

    Without CUDA cards (``gpus=0``): ``workers`` plain workers (no resources, environment
    unchanged), the cluster of every build so far. With ``gpus`` cards: ``per_card`` GPU workers
    per card (default :data:`GPU_PER_CARD_ENV` or 1), each seeing only its card
    (``CUDA_VISIBLE_DEVICES``) and offering the resource ``GPU=1``, and CPU workers for the
    rest of ``workers`` (at least one), which see no card (``CUDA_VISIBLE_DEVICES=""``, so a
    notebook's ``device="auto"`` is the CPU there) and offer ``CPU=1``. A notebook that uses the
    device asks for ``GPU``, the others for ``CPU`` (:func:`attnsvm_book.build.execute_notebooks`),
    so no more than ``per_card`` contexts share a card."""
    workers, gpus = max(1, int(workers)), max(0, int(gpus))
    if gpus == 0:
        return [{"name": f"cpu-{i}", "resources": None, "env": {}} for i in range(workers)]
    if per_card is None:
        per_card = int(os.environ.get(GPU_PER_CARD_ENV, "1") or 1)
    if per_card < 1:
        raise ValueError(f"GPU workers per card must be >= 1, got {per_card} "
                         f"(${GPU_PER_CARD_ENV})")
    plan = [{"name": f"gpu{c}-{j}", "resources": {"GPU": 1}, "env": {"CUDA_VISIBLE_DEVICES": str(c)}}
            for c in range(gpus) for j in range(per_card)]
    plan += [{"name": f"cpu-{i}", "resources": {"CPU": 1}, "env": {"CUDA_VISIBLE_DEVICES": ""}}
             for i in range(max(1, workers - len(plan)))]
    return plan


def threads_per_worker(workers: int) -> int:
    """BLAS/torch threads of each of ``workers`` local workers: the cores shared out, at least 1."""
    return max(1, (os.cpu_count() or 1) // max(1, int(workers)))


def parse_resources(text: str | None) -> dict | None:
    """``"GPU=1,MEM=8e9"`` -> ``{"GPU": 1.0, "MEM": 8e9}`` (Dask worker resources of a task)."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"resources must look like 'GPU=1' or 'GPU=1,MEM=8e9', got {text!r}") from None
    return out


def make_job(root, notebook: str, parameters: dict, out_path, failed_path, *, device: str = "auto",
             kernel_name: str = "python3", threads: int | None = None, name: str | None = None,
             resolved: str | None = None, strict_claims: bool = False,
             resources: dict | None = None) -> dict:
    """A job for :func:`run_job` (plain, picklable values only).

    ``device`` is the notebook's ``device`` parameter; ``resolved`` is what it resolves to on
    this machine, given when the job runs here (in-process or on a local cluster) so that the
    worker need not import torch to find out; on a remote cluster the worker resolves it.
    ``strict_claims``: a false checked claim fails the notebook (the book's build).
    ``resources``: what the job needs of a Dask worker (``{"GPU": 1}`` or ``{"CPU": 1}`` on a
    cluster of :func:`worker_plan`).
    """
    return {"root": str(root), "notebook": notebook, "parameters": dict(parameters),
            "environ": {k: os.environ.get(k) for k in KERNEL_ENVIRON},
            "out_path": str(out_path), "failed_path": str(failed_path), "device": str(device),
            "kernel_name": kernel_name, "threads": threads, "name": name or notebook,
            "resolved": resolved, "strict_claims": bool(strict_claims), "resources": resources}


@contextlib.contextmanager
def _environment(values: dict):
    """Set the environment variables ``values`` (name -> str, or None: unset) while a kernel
    starts (it inherits them); restored afterwards."""
    with _ENV_LOCK:
        old = {k: os.environ.get(k) for k in values}

        def put(items):
            for k, v in items.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = str(v)
        put(values)
        try:
            yield
        finally:
            put(old)


def _thread_environment(threads: int | None):
    """Set :data:`THREAD_VARIABLES` to ``threads`` while a kernel starts (it inherits them)."""
    return _environment({} if threads is None else {k: int(threads) for k in THREAD_VARIABLES})


def _worker_label() -> str:
    host = socket.gethostname()
    try:
        from distributed import get_worker

        return f"{get_worker().address} ({host})"
    except (ImportError, ValueError):
        return f"in-process (pid {os.getpid()}, {host})"


@contextlib.contextmanager
def _engine_log():
    """Point :data:`attnsvm._env.ENGINE_LOG_ENV` at a fresh file while a kernel starts (it
    inherits it; every ``fit`` in the notebook appends ``<device> <engine>``); yields a function
    that returns what was logged (:func:`engine_summary`) once the notebook has run."""
    import tempfile

    from attnsvm._env import ENGINE_LOG_ENV

    fd, path = tempfile.mkstemp(prefix="attnsvm-engines-", suffix=".log")
    os.close(fd)
    with _ENV_LOCK:
        old = os.environ.get(ENGINE_LOG_ENV)
        os.environ[ENGINE_LOG_ENV] = path
    try:
        yield lambda: engine_summary(Path(path).read_text().splitlines())
    finally:
        with _ENV_LOCK:
            if old is None:
                os.environ.pop(ENGINE_LOG_ENV, None)
            else:
                os.environ[ENGINE_LOG_ENV] = old
        Path(path).unlink(missing_ok=True)


def engine_summary(lines) -> str:
    """The engine paths of a notebook's ``fit`` calls (lines ``<device> <engine>``), each once in
    order of first use and joined by ``+`` (e.g. ``"cuda-graph+eager"``); ``"none"`` when the
    notebook trained nothing through ``fit``."""
    seen = dict.fromkeys(line.split()[1] for line in lines if len(line.split()) == 2)
    return "+".join(seen) or "none"


def run_job(job: dict) -> dict:
    """Execute one job where it runs (in-process or on a Dask worker); never raises ``Exception``.

    Returns ``{"status": "ok"|"failed"|"no-data", "seconds", "device", "device_label", "engine", "worker",
    "error"}``; ``engine`` is :func:`engine_summary` of the notebook's ``fit`` calls.
    ``"no-data"``: the notebook raised :data:`attnsvm_book._core.MISSING_DATA` (its data files are
    not on disk). A kernel that dies before its first reply (two kernels racing for a port on a
    busy machine) is started again, up to :data:`attnsvm_book._core.KERNEL_START_RETRIES` times.
    ``KeyboardInterrupt`` and other ``BaseException`` propagate (nothing is cached
    then).
    """
    worker = _worker_label()
    t0 = time.perf_counter()
    try:
        device = job.get("resolved") or resolve_device(job["device"])
        label = _device_label(device)
    except Exception as exc:  # e.g. device='cuda' on a worker without CUDA
        return {"status": "failed", "seconds": 0.0, "device": job["device"],
                "device_label": job["device"], "engine": None, "worker": worker,
                "error": f"{job['name']}: {type(exc).__name__}: {exc}"}
    engine = None
    try:
        # the kernel inherits the thread caps, the scheduling process's KERNEL_ENVIRON and the
        # engine log; the job's own process is not affected afterwards
        with _thread_environment(job.get("threads")), _environment(job.get("environ", {})), \
                _engine_log() as engines:
            try:
                for attempt in range(KERNEL_START_RETRIES + 1):
                    try:
                        _execute_one(Path(job["root"]), job["notebook"], job["parameters"],
                                     Path(job["out_path"]), Path(job["failed_path"]),
                                     job["kernel_name"],
                                     strict_claims=job.get("strict_claims", False))
                        break
                    except RuntimeError as exc:   # a kernel that never started: start again
                        if not kernel_start_failed(exc) or attempt == KERNEL_START_RETRIES:
                            raise
            finally:
                engine = engines()
    except Exception as exc:
        why = missing_data(exc)
        return {"status": "no-data" if why is not None else "failed",
                "seconds": time.perf_counter() - t0, "device": device,
                "device_label": label, "engine": engine, "worker": worker,
                "error": (f"{job['name']}: data not on disk ({why})" if why is not None
                          else _describe_failure(job["name"], exc))}
    return {"status": "ok", "seconds": time.perf_counter() - t0, "device": device,
            "device_label": label, "engine": engine, "worker": worker, "error": None}


@contextlib.contextmanager
def dask_client(workers: int | None = None, scheduler: str | None = None,
                plan: list[dict] | None = None):
    """A ``distributed.Client``: on ``scheduler`` when given, else on a new ``LocalCluster`` of
    ``workers`` processes (one thread each, BLAS/torch threads capped), closed on exit; with a
    ``plan`` of :func:`worker_plan` that has GPU workers, a cluster of those workers (each its
    own resources and ``CUDA_VISIBLE_DEVICES``)."""
    from distributed import Client, LocalCluster

    if scheduler is None and plan and any(w["resources"] for w in plan):
        with _planned_cluster(plan) as cluster:
            client = Client(cluster)
            try:
                yield client
            finally:
                client.close()
        return

    if scheduler:
        client = Client(scheduler)
        try:
            yield client
        finally:
            client.close()
        return
    workers = int(workers or default_workers())
    threads = threads_per_worker(workers)
    env = {k: str(threads) for k in THREAD_VARIABLES}
    import dask

    # worker-saturation 1.0: a worker holds one notebook at a time and the rest wait at the
    # scheduler for whichever worker frees first (notebooks are long, unequal tasks; the default
    # 1.1 would queue two behind one worker while another idles)
    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}), _nanny_leak():
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR,
                               memory_limit=0, env=env)
    try:
        client = Client(cluster)
        try:
            yield client
        finally:
            client.close()
    finally:
        cluster.close()


@contextlib.contextmanager
def _nanny_leak():
    """Undo, once a local cluster is up, what its nannies wrote into this process's environment
    (``distributed.nanny.pre-spawn-environ``: ``MALLOC_TRIM_THRESHOLD_``, BLAS thread caps), so
    that the jobs made here (:data:`KERNEL_ENVIRON`) and kernels started here later do not
    inherit it."""
    import dask

    names = set(dask.config.get("distributed.nanny.pre-spawn-environ", {})) | set(KERNEL_ENVIRON)
    before = {k: os.environ.get(k) for k in names}
    try:
        yield
    finally:
        with _ENV_LOCK:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@contextlib.contextmanager
def _planned_cluster(plan):
    """A local cluster of the workers of ``plan`` (one process and one thread each)."""
    import dask
    from distributed import Nanny, Scheduler, SpecCluster

    threads = threads_per_worker(len(plan))
    spec = {w["name"]: {"cls": Nanny, "options": {
        "nthreads": 1, "memory_limit": 0, "resources": w["resources"],
        "env": {**{k: str(threads) for k in THREAD_VARIABLES}, **w["env"]}}} for w in plan}
    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}), _nanny_leak():
        cluster = SpecCluster(workers=spec, silence_logs=logging.ERROR,
                              scheduler={"cls": Scheduler, "options": {"dashboard_address": None}})
    try:
        yield cluster
    finally:
        cluster.close()


def _resolve_on_worker(device: str) -> str:
    return resolve_device(device)


def device_resolver(scheduler: str | None = None, resources: dict | None = None):
    """A function ``device parameter -> device name`` for cache keys, evaluated where the
    notebooks run: here without ``scheduler``, else on a worker of that cluster (one task per
    distinct value, e.g. ``"auto"`` is ``"cuda"`` on a GPU worker), so that a re-run finds the
    cache entries of the device the notebooks actually ran on."""
    if scheduler is None:
        return resolve_device
    seen: dict[str, str] = {}

    def resolve(device: str) -> str:
        if device not in seen:
            with dask_client(scheduler=scheduler) as client:
                seen[device] = client.submit(_resolve_on_worker, device, pure=False,
                                             resources=resources).result()
        return seen[device]

    return resolve


class Progress:
    """One line per finished job (through ``log``) and a progress bar on a terminal's stderr.

    ``bar=None`` shows the bar when stderr is a terminal; lines are written above the bar.
    """

    def __init__(self, total: int, log=print, bar: bool | None = None, desc: str = "notebooks"):
        from tqdm import tqdm

        self.total, self.done, self.log = total, 0, log
        show = sys.stderr.isatty() if bar is None else bar
        self.bar = tqdm(total=total, desc=desc, file=sys.stderr, disable=not show, leave=False,
                        unit="nb", dynamic_ncols=True)

    def tag(self) -> str:
        width = len(str(self.total))
        return f"[{self.done:>{width}}/{self.total}]"

    def step(self, message: str) -> None:
        """Count one finished job and write ``"[k/N] message"``."""
        self.done += 1
        line = f"{self.tag()} {message}"
        if self.bar.disable:
            self.log(line)
        else:
            with self.bar.external_write_mode():
                self.log(line)
            self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def run_jobs(jobs: list[dict], on_result, *, workers: int | None = 1, scheduler: str | None = None,
             resources: dict | None = None, plan: list[dict] | None = None) -> None:
    """Run ``jobs``; call ``on_result(job, result)`` as each finishes (see :func:`run_job`).

    ``workers=1`` (or ``None``) without a ``scheduler`` runs them in this process in order (the
    serial build); otherwise they are Dask tasks on a local cluster of ``workers`` processes (or
    of the workers of ``plan``, :func:`worker_plan`) or on the cluster at ``scheduler``. A job's
    own ``"resources"`` (a GPU or a CPU worker) take precedence over ``resources``. A task that
    dies with its worker is reported as failed.
    """
    if not jobs:
        return
    if scheduler is None and (workers is None or int(workers) <= 1):
        for job in jobs:
            on_result(job, run_job(job))
        return
    from distributed import as_completed

    workers = min(int(workers or default_workers()), len(jobs)) if scheduler is None else None
    with dask_client(workers, scheduler, plan) as client:
        futures = {}
        for i, job in enumerate(jobs):
            fut = client.submit(run_job, job, pure=False,
                                resources=job.get("resources") or resources,
                                key=f"attnsvm-{i}-{Path(job['name']).stem}-{os.urandom(4).hex()}")
            futures[fut] = job
        try:
            for fut in as_completed(list(futures)):
                job = futures[fut]
                try:
                    result = fut.result()
                except Exception as exc:  # the worker died, the task could not be run, ...
                    result = {"status": "failed", "seconds": None, "device": job["device"],
                              "device_label": job["device"], "engine": None, "worker": None,
                              "error": f"{job['name']}: the Dask task failed with "
                                       f"{type(exc).__name__}: {exc}"}
                on_result(job, result)
        finally:
            client.cancel(list(futures))
