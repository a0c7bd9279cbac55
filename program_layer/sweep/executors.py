"""Where cells run: in this process, on a local process pool, or on a Ray cluster.

One small interface: ``Executor.run(fn, tasks)`` yields ``(position, result)`` pairs as tasks
finish (any order); the caller sorts results back into grid order. ``fn`` is a module-level
function that never raises (``cell_run.run_cell``); a failure of the executor itself (a
worker process that died, a lost Ray node) is yielded as an ``ExecutorFailure`` for that task
instead, so one broken cell never hides the others.

Heavy imports (ray) happen only when a Ray executor is created.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from llmservingsim.errors import ConfigError

RAY_INSTALL_HINT = ("the Ray executor needs Ray, which is not installed; install it with "
                    "`pip install 'agentservesim[ray]'` (or `pip install ray`), or use --executor local")


@dataclass(frozen=True)
class ExecutorFailure:
    """The executor could not run a task (not the task's own error)."""

    message: str


class Executor(ABC):
    """Runs ``fn(task)`` for each task; yields ``(position, result)`` as each finishes."""

    name = "executor"

    @abstractmethod
    def run(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        ...

    def close(self) -> None:
        """Release workers (idempotent)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SerialExecutor(Executor):
    """Runs tasks one after another in this process (debugging, tests, one-core machines)."""

    name = "serial"

    def run(self, fn, tasks):
        for position, task in enumerate(tasks):
            yield position, fn(task)


class LocalExecutor(Executor):
    """A ``concurrent.futures`` process pool with the spawn start method.

    Spawn (not fork) so workers start clean on every platform and never inherit a parent's
    threads or locks; the task function and its arguments must therefore be picklable.
    """

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._pool: ProcessPoolExecutor | None = None

    def run(self, fn, tasks):
        if not tasks:
            return
        self._pool = ProcessPoolExecutor(max_workers=min(self.workers, len(tasks)),
                                         mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_worker_init, initargs=(os.getpid(),))
        futures = {self._pool.submit(fn, task): position for position, task in enumerate(tasks)}
        pending = set(futures)
        broken: list[int] = []
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(finished, key=futures.__getitem__):
                    try:
                        result = future.result()
                    except BrokenProcessPool:
                        # a worker died (os._exit, segfault, OOM kill): the pool fails every
                        # cell it held, so those are retried one by one below
                        broken.append(futures[future])
                        continue
                    except Exception as exc:  # unpicklable result, ...
                        result = ExecutorFailure(f"worker failed: {type(exc).__name__}: {exc}")
                    yield futures[future], result
        finally:
            if pending:  # interrupted (Ctrl-C) or abandoned: stop running cells now
                self._terminate()
        if broken:
            self._pool = None
        for position in sorted(broken):
            yield position, self._run_isolated(fn, tasks[position])

    @staticmethod
    def _run_isolated(fn, task):
        """Run one cell in a pool of its own: only a cell that itself kills its worker fails."""
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_worker_init, initargs=(os.getpid(),)) as solo:
            try:
                return solo.submit(fn, task).result()
            except BrokenProcessPool as exc:
                return ExecutorFailure(f"worker crashed (the process died while running this cell): {exc}")
            except Exception as exc:
                return ExecutorFailure(f"worker failed: {type(exc).__name__}: {exc}")

    def _terminate(self) -> None:
        """Cancel queued cells and kill the workers; their unfinished cells have no ``done``
        marker, so the next invocation runs them again."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if hasattr(pool, "terminate_workers"):  # Python >= 3.14
            pool.terminate_workers()
            return
        # No public way to reach the workers before 3.14; _processes maps pid -> Process.
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(timeout=5)

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


PARENT_POLL_S = 0.5


def _worker_init(parent_pid: int) -> None:
    """Pool worker initializer.

    Ctrl-C reaches the whole process group, but only the driver should react (it then
    terminates the workers), so a half-written cell is never reported: workers ignore SIGINT.
    A driver killed outright (SIGKILL, OOM) cannot terminate anyone, and its workers would
    block on the task queue forever: a daemon thread in each worker exits the worker within
    PARENT_POLL_S of its parent's death (polling ``getppid``, which works on every POSIX
    platform and for any user; Linux's PR_SET_PDEATHSIG would tie it to the spawning thread).
    A cell cut short this way has no ``done`` marker, so the next invocation reruns it.
    """
    import threading
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class RayExecutor(Executor):
    """Ray tasks (one CPU each) on a cluster at ``address`` or a local instance.

    If Ray is already initialised in this process (e.g. by a test or a notebook) that
    connection is used and left open; otherwise one is started here and shut down on close.
    The sweep's output folder must be on a filesystem every Ray node can write.
    """

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        try:
            import ray
        except ImportError:
            raise ConfigError(RAY_INSTALL_HINT) from None
        self._ray = ray
        self._owns = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                _check_reachable(address)
                kwargs["address"] = address
            elif workers:
                kwargs["num_cpus"] = workers
            try:
                ray.init(**kwargs)
            except Exception as exc:  # a wrong address, a cluster that is not up
                raise ConfigError(f"cannot start or reach Ray ({address or 'local'}): {exc}",
                                  key="--ray-address" if address else None) from None
            self._owns = True

    def run(self, fn, tasks):
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = {remote.remote(task): position for position, task in enumerate(tasks)}
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    try:
                        result = ray.get(ref)
                    except Exception as exc:  # worker crash, lost node
                        result = ExecutorFailure(f"Ray task failed: {type(exc).__name__}: {exc}")
                    yield refs[ref], result
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def close(self):
        if self._owns:
            self._ray.shutdown()
            self._owns = False


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not minutes, on a mistyped 'host:port' or 'ray://host:port' address
    (Ray itself retries an unreachable head for a long time). 'auto' and other forms are
    left to Ray."""
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach a Ray cluster at {address}: {exc.strerror or exc}",
                          key="--ray-address") from None


def make_executor(kind: str, *, workers: int | None = None, ray_address: str | None = None) -> Executor:
    """The executor named on the command line: 'local' (default), 'ray' or 'serial'."""
    if kind == "local":
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(ray_address, workers)
    if kind == "serial":
        return SerialExecutor()
    raise ConfigError(f"unknown executor '{kind}' (local, ray, serial)", key="--executor")
