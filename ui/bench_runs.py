"""Benchmark runs in background threads for the app's sessions (no streamlit, no torch here).

`mla_core.bench.run_benchmark` blocks for seconds to minutes and holds a process-wide lock (one
run at a time: two runs would measure each other). The benchmark page starts a run as a `Job`
in a thread of the server process, and every session polls the one server-wide `registry()`:

- one job per session (`owner`, a random token the page keeps in its session state);
- a job whose run cannot take the lock yet waits ("waiting"), re-trying every
  `LOCK_POLL_S` until the lock is free, `MAX_WAIT_S` passes or it is cancelled; at most
  `MAX_ACTIVE` jobs wait or run at once;
- `progress(done, total, label)` from the run moves the job to "running" and records where
  it is; `cancel(owner)` sets the job's event: the run stops at its next repetition and frees
  its tensors (mla_core.bench.run), a waiting job never starts;
- a finished run is saved to the history (`mla_core.store.history.save_run`, source 'local')
  by the thread itself, so that it is kept even if its session has gone;
- `take(owner)` hands a finished job to its session once; finished jobs nobody took are
  dropped after `KEEP_FINISHED_S`.
- a kernel profile (`ProfileRequest`: `mla_core.bench.profile.run_profile`, saved by
  `save_profile_table` as a run of kind "profile") is a job of the same registry under the
  key `profile_owner(owner)`, so a session may have one benchmark and one profile queued; they
  take the same lock, one after the other;
- `note_rerun(session)` (ui.state.init, every rerun of every session) counts page reruns per
  session; a run's result gets `other_sessions_reruns`, the reruns of other sessions while it
  measured, as evidence of disturbance (mla_core.store.disturbance): they share its CPUs and
  the same process, so the run's own "other processes" figure cannot see them.
torch is imported by the worker thread only (through mla_core.bench.run).
"""
from __future__ import annotations

import dataclasses
import sys
import threading
import time
from typing import Any

from mla_core.errors import MLAError

ACTIVE = ("waiting", "running")
FINISHED = ("done", "failed", "cancelled")
MAX_ACTIVE = 4  # jobs waiting or running at once, all sessions together
MAX_WAIT_S = 1800.0  # a waiting job gives up after this
LOCK_POLL_S = 0.5  # how long one attempt waits for the benchmark lock
KEEP_FINISHED_S = 3600.0


@dataclasses.dataclass
class Job:
    """One requested run. `config` is a checked `mla_core.bench.BenchConfig`."""

    owner: str
    config: Any
    label: str | None = None
    cancel: threading.Event = dataclasses.field(default_factory=threading.Event)
    state: str = "waiting"  # waiting | running | done | failed | cancelled
    done: int = 0  # points finished (the run's progress callback)
    total: int = 0  # points in the run (0 until it starts)
    step: str = ""  # the point being measured
    started_at: float = dataclasses.field(default_factory=time.time)
    finished_at: float | None = None
    result: dict | None = None
    run_id: int | None = None  # history id of the saved result
    error: str | None = None  # why it failed or was cancelled (one line)
    save_error: str | None = None  # the run finished but could not be saved
    session: str | None = None  # the Streamlit session that started it (its own reruns are not counted)
    reruns_at_start: dict | None = None  # note_rerun counts when the run began measuring
    thread: threading.Thread | None = dataclasses.field(default=None, repr=False)


PROFILE = ":profile"  # a session's kernel profile job is its owner token + this (one of each at once)


def profile_owner(owner: str) -> str:
    """The registry key of `owner`'s kernel profile job (beside its benchmark job)."""
    return owner + PROFILE


def same_session(job_owner: str, owner: str) -> bool:
    """Whether a job (benchmark or kernel profile) belongs to the session whose token is `owner`."""
    return job_owner == owner or job_owner == profile_owner(owner)


@dataclasses.dataclass(frozen=True)
class ProfileRequest:
    """A kernel profile the page asks for (`mla_core.bench.profile.run_profile` arguments):
    `model` a ModelSpec, `tp`, `device`, `quick`, `families` (the op families measured)."""

    model: Any
    tp: int = 1
    device: str = "auto"
    quick: bool = True
    families: tuple = ()


def run_flag(run: dict) -> str:
    """The mark every list, chart title and legend gives a stored run (history.list_runs row) or a
    result dict: ' [damaged]', ' [disturbed]' or ''."""
    if run.get("damaged"):
        return " [damaged]"
    block = run.get("disturbed")
    if block is True or (isinstance(block, dict) and block.get("disturbed")):
        return " [disturbed]"
    return ""


def disturbed_reasons(result: dict) -> list[str]:
    """A result's reasons for being disturbed (empty when it was not, or it does not say)."""
    block = result.get("disturbed")
    return list(block.get("reasons") or []) if isinstance(block, dict) and block.get("disturbed") else []


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text[:limit] + ("..." if len(text) > limit else "")


class Registry:
    """The server's benchmark jobs (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._reruns: dict[str, int] = {}  # session -> reruns so far

    def note_rerun(self, session: str | None) -> None:
        """Count one rerun of `session` (only while a run is waiting or running: nothing to do otherwise)."""
        if session is None:
            return
        with self._lock:
            if any(j.state in ACTIVE for j in self._jobs.values()):
                self._reruns[session] = self._reruns.get(session, 0) + 1

    def _others_since(self, job: Job) -> int | None:
        if job.reruns_at_start is None:
            return None
        return sum(n - job.reruns_at_start.get(s, 0) for s, n in self._reruns.items() if s != job.session)

    # -- reading ---------------------------------------------------------------------------------
    def job(self, owner: str) -> Job | None:
        """A copy of `owner`'s job, or None."""
        with self._lock:
            j = self._jobs.get(owner)
            return dataclasses.replace(j) if j is not None else None

    def active(self) -> list[Job]:
        """Copies of the jobs waiting or running, oldest first."""
        with self._lock:
            self._prune()
            return [dataclasses.replace(j) for j in sorted(self._jobs.values(), key=lambda j: j.started_at)
                    if j.state in ACTIVE]

    def running(self) -> Job | None:
        """A copy of the job whose run holds the benchmark lock now, or None."""
        return next((j for j in self.active() if j.state == "running"), None)

    # -- changing --------------------------------------------------------------------------------
    def start(self, owner: str, config, label: str | None = None, session: str | None = None) -> Job:
        """Start `owner`'s run of `config` in a thread. Raises MLAError when the owner has a job
        waiting or running, or when MAX_ACTIVE jobs already are."""
        with self._lock:
            self._prune()
            mine = self._jobs.get(owner)
            if mine is not None and mine.state in ACTIVE:
                raise MLAError("this session already has a benchmark waiting or running; cancel it first")
            if sum(j.state in ACTIVE for j in self._jobs.values()) >= MAX_ACTIVE:
                raise MLAError(f"{MAX_ACTIVE} benchmarks are already waiting or running on this server; "
                               "try again when one has finished")
            job = Job(owner=owner, config=config, label=label, session=session)
            job.thread = threading.Thread(target=self._work, args=(job,), name=f"mla-bench-{owner[:8]}",
                                          daemon=True)
            self._jobs[owner] = job
        job.thread.start()
        return dataclasses.replace(job)

    def cancel(self, owner: str) -> bool:
        """Ask `owner`'s waiting or running job to stop; True if there was one."""
        with self._lock:
            j = self._jobs.get(owner)
            if j is None or j.state not in ACTIVE:
                return False
            j.cancel.set()
            return True

    def take(self, owner: str) -> Job | None:
        """`owner`'s finished job, removed from the registry (once); None while it is still
        waiting or running, or when there is none."""
        with self._lock:
            j = self._jobs.get(owner)
            if j is None or j.state not in FINISHED:
                return None
            del self._jobs[owner]
            return j

    def join(self, owner: str, timeout: float | None = None) -> bool:
        """Wait for `owner`'s job thread to end (tests, shutdown); True when it has."""
        with self._lock:
            j = self._jobs.get(owner)
        if j is None or j.thread is None:
            return True
        j.thread.join(timeout)
        return not j.thread.is_alive()

    def _prune(self) -> None:
        now = time.time()
        for owner in [o for o, j in self._jobs.items()
                      if j.state in FINISHED and j.finished_at and now - j.finished_at > KEEP_FINISHED_S]:
            del self._jobs[owner]
        if not any(j.state in ACTIVE for j in self._jobs.values()):
            self._reruns.clear()

    # -- the worker ------------------------------------------------------------------------------
    def _set(self, job: Job, **changes) -> None:
        with self._lock:
            for k, v in changes.items():
                setattr(job, k, v)

    def _work(self, job: Job) -> None:
        from mla_core.store import disturbance, history
        from mla_core.bench.errors import BenchBusy, BenchCancelled

        def progress(done: int, total: int, label: str) -> None:
            with self._lock:
                if job.reruns_at_start is None:  # it holds the lock and measures from now on
                    job.reruns_at_start = dict(self._reruns)
                job.state, job.done, job.total, job.step = "running", done, total, str(label)[:120]

        deadline = time.monotonic() + MAX_WAIT_S
        try:
            profile = isinstance(job.config, ProfileRequest)
            what = "kernel profile" if profile else "benchmark"
            try:
                from mla_core.bench import run as bench_run  # imports torch, in this thread only
                if profile:
                    from mla_core.bench import profile as bench_profile
            except ImportError as e:
                from mla_core.install import setup

                raise MLAError(f"the {what} needs torch ({e}); {setup().torch_install}") from None
            while True:
                if job.cancel.is_set():
                    raise BenchCancelled(f"{what} cancelled before it started; nothing was allocated")
                try:
                    # Looked up at call time, so that tests can replace run_benchmark / run_profile.
                    if profile:
                        req = job.config
                        run = bench_profile.run_profile(req.model, tp=req.tp, device=req.device, quick=req.quick,
                                                        families=tuple(req.families) or bench_profile.FAMILIES,
                                                        progress=progress, cancel=job.cancel, wait=LOCK_POLL_S,
                                                        source="app")
                    else:
                        result = bench_run.run_benchmark(job.config, progress=progress, cancel=job.cancel,
                                                         wait=LOCK_POLL_S, source="app")
                    break
                except BenchBusy:
                    if time.monotonic() > deadline:
                        raise BenchBusy(f"waited {MAX_WAIT_S / 60:.0f} minutes for the other benchmark to finish; "
                                        "try again later") from None
            run_id, save_error = None, None
            if profile:  # the store keeps a profile's meta with its table (mla_core.store.profiles)
                result = run.to_dict()
                try:
                    run_id = bench_profile.save_profile_table(run, label=job.label)
                except MLAError as e:
                    save_error = _one_line(e)
                self._set(job, result=result, run_id=run_id, save_error=save_error, state="done")
                return
            with self._lock:
                others = self._others_since(job)
            disturbance.add_evidence(result, other_sessions_reruns=others)
            try:
                run_id = history.save_run(result, source="local", label=job.label)
            except MLAError as e:
                save_error = _one_line(e)
            self._set(job, result=result, run_id=run_id, save_error=save_error, state="done")
        except BenchCancelled as e:
            self._set(job, state="cancelled", error=_one_line(e))
        except MLAError as e:
            self._set(job, state="failed", error=_one_line(e))
        except Exception as e:  # noqa: BLE001 - a bug in a thread: keep the server up, say what happened
            what = "kernel profile" if isinstance(job.config, ProfileRequest) else "benchmark"
            self._set(job, state="failed", error=_one_line(f"the {what} failed: {type(e).__name__}: {e}"))
        finally:
            self._set(job, finished_at=time.time())
            release = getattr(sys.modules.get("mla_core.bench.run"), "_release_heap", None)
            if release is not None:
                release()  # what saving and the run's thread left behind, back to the OS


_REGISTRY = Registry()


def registry() -> Registry:
    """The server process's registry (one per process; runs of every process on the machine
    exclude each other through mla_core.store.runlock)."""
    return _REGISTRY
