"""Start the servers as child processes, wait until they answer, stop exactly those.

A started server is recorded in ``state.json`` with its pid and the kernel's start time of
that pid, so ``stop`` never signals a process that merely reuses the number. Each JVM leads
its own process group; with ``die_with_parent`` the kernel kills it when the process that
started it dies, even by SIGKILL (``PR_SET_PDEATHSIG``), so no server outlives a test run.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import maven
from .servers import Ports, Server, Topology, single

PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Started:
    name: str
    pid: int
    starttime: int
    log: Path


def _proc_starttime(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields 3 (state) and 22 (start time); the command name (field 2) may hold spaces,
    # so split after its ')'.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # exited; reap it if it is our child, and call it gone
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return None
    return int(fields[19])


def _alive(proc: Started) -> bool:
    return _proc_starttime(proc.pid) == proc.starttime


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Supervisor:
    """The servers of one run folder (``run_dir``): start, wait, stop, describe."""

    def __init__(
        self,
        run_dir: Path,
        cache: Path,
        ports: Ports | None = None,
        *,
        topology: Topology | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.cache = cache
        self.ports = ports or Ports()
        self.topology = topology or single(self.ports)
        self.servers = self.topology.servers
        self.state_file = run_dir / "state.json"
        # Popen objects of the children this instance started: waited for on stop, so they
        # are reaped and never reported as still running when collected.
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------ state
    def _load(self) -> dict[str, Started]:
        if not self.state_file.exists():
            return {}
        raw = json.loads(self.state_file.read_text())
        return {
            n: Started(n, p["pid"], p["starttime"], Path(p["log"]))
            for n, p in raw.get("processes", {}).items()
        }

    def _owner(self) -> int | None:
        """The pid of the process whose :meth:`start` made this run folder's servers."""
        if not self.state_file.exists():
            return None
        owner = json.loads(self.state_file.read_text()).get("owner")
        return owner if isinstance(owner, int) else None

    def _save(self, started: dict[str, Started], owner: int | None = None) -> None:
        procs = {
            s.name: {"pid": s.pid, "starttime": s.starttime, "log": str(s.log)}
            for s in started.values()
        }
        owner = owner if owner is not None else self._owner()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        state = {"endpoints": self.topology.endpoints, "processes": procs, "owner": owner}
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def running(self) -> dict[str, Started]:
        return {n: s for n, s in self._load().items() if _alive(s)}

    # ------------------------------------------------------------ fetch / start
    def fetch(self, names: Iterable[str]) -> dict[str, str]:
        return {name: self._resolve(name) for name in names}

    def _resolve(self, name: str) -> str:
        server = self.servers[name]
        if server.resolve is not None:
            return server.resolve()
        return maven.classpath(server.pom or name, self.cache)

    def start(self, names: list[str], die_with_parent: bool = False) -> None:
        """Start ``names`` on fresh data folders and wait until every one answers
        (``die_with_parent``: see :meth:`restart`)."""
        if self.running():
            raise RuntimeError(f"servers of {self.run_dir} are already running; stop them first")
        classpaths = self.fetch(names)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        started: dict[str, Started] = {}
        try:
            for name in names:
                started[name] = self._spawn(self.servers[name], classpaths[name], die_with_parent)
                self._save(started, owner=os.getpid())
            self._wait([self.servers[n] for n in names], started)
        except BaseException:
            self.stop()
            raise

    def restart(self, name: str, die_with_parent: bool = False, wait: bool = True) -> None:
        """Start ``name`` again on the data it has (after a crash or a SIGKILL): its command
        line only, not the steps that made its data (Kafka's storage format); then wait
        until it answers, unless ``wait`` is False (:meth:`wait` does it later).

        ``die_with_parent`` ties the server to the *thread* that starts it (the kernel's
        parent-death signal follows the thread): start from a thread that lives as long."""
        if name in self.running():
            raise RuntimeError(f"{name} of {self.run_dir} is still running")
        started = {n: s for n, s in self._load().items() if n != name and _alive(s)}
        server = self.servers[name]
        started[name] = self._spawn(server, self._resolve(name), die_with_parent, fresh=False)
        self._save(started)
        if wait:
            self._wait([server], started)

    def wait(self, names: list[str]) -> None:
        """Wait until the running servers ``names`` answer."""
        self._wait([self.servers[n] for n in names], self._load())

    def _spawn(
        self, server: Server, cp: str, die_with_parent: bool, *, fresh: bool = True
    ) -> Started:
        data = self.run_dir / server.name
        data.mkdir(parents=True, exist_ok=not fresh)
        launch = server.prepare(data, cp)
        log = data / "server.log"
        for argv in launch.pre if fresh else []:
            done = subprocess.run(argv, cwd=data, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                output = done.stdout + done.stderr
                raise RuntimeError(f"{server.name}: {argv[-5:]} failed:\n{output}")
        with log.open("wb" if fresh else "ab") as out:
            proc = subprocess.Popen(
                launch.argv,
                cwd=data,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent if die_with_parent else None,
            )
        self._children[proc.pid] = proc
        starttime = _proc_starttime(proc.pid)
        if starttime is None:
            raise RuntimeError(f"{server.name} exited at once:\n{tail(log)}")
        return Started(server.name, proc.pid, starttime, log)

    def _wait(self, servers: list[Server], started: dict[str, Started]) -> None:
        t0 = time.monotonic()
        pending = {s.name: s for s in servers}
        while pending:
            for name, server in list(pending.items()):
                proc = started[name]
                if not _alive(proc):
                    raise RuntimeError(f"{name} died while starting; log tail:\n{tail(proc.log)}")
                if server.ready():
                    print(f"  {name} ready in {time.monotonic() - t0:.1f}s", flush=True)
                    del pending[name]
                elif time.monotonic() - t0 > server.start_timeout:
                    raise RuntimeError(
                        f"{name} did not answer within {server.start_timeout:.0f}s; "
                        f"log tail:\n{tail(proc.log)}"
                    )
            time.sleep(0.5)

    # ------------------------------------------------------------ stop
    def stop(self, grace: float = 20.0, *, own_only: bool = False) -> list[str]:
        """Stop the processes this run folder started (TERM, then KILL); return their names.

        ``own_only``: only if this process started them (restarts by tests included). A
        ``run`` refused because another run's servers were up, or orphaned while another
        run took the folder over, must leave that run's servers alone on its way out."""
        if own_only and self._owner() != os.getpid():
            return []
        procs = self.running()
        for name, proc in procs.items():
            server = self.servers.get(name)
            _signal_group(proc.pid, server.stop_signal if server else signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(_alive(p) for p in procs.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for proc in procs.values():
            if _alive(proc):
                _signal_group(proc.pid, signal.SIGKILL)
        for child in self._children.values():
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._children.clear()
        if self.state_file.exists():
            self.state_file.unlink()
        return sorted(procs)

    def logs(self) -> dict[str, Path]:
        return {n: s.log for n, s in self._load().items()}


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # the JVM leads its own group (start_new_session)
    except ProcessLookupError:
        pass
