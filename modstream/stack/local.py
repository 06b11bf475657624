"""The embedded local stack: Tansu (Kafka API), Redis and tritonserver as subprocesses.

Used by ``modstream stack up|down|status``, the test fixtures and the demo. Each
server runs in its own session (so ``stack up`` can exit and leave them running),
logs to ``<state_dir>/<service>.log``, and its pid is persisted with the endpoints
in ``<state_dir>/stack.json`` so ``down``/``status`` work from another process.
``down`` only signals process groups this stack started. A stack held by a ``with`` block is tied
to the process holding it: its servers get SIGTERM when that process dies, however it dies
(``kill -9`` or a CI timeout included), where ``stack up``'s outlive it.

A durable stack (``modstream stack up``'s default) also runs an S3 server whose buckets are kept
in ``<state_dir>/s3`` (modstream/stack/s3store.py) and keeps the broker's topics and group offsets
there (Tansu's ``s3://`` engine), so a ``stack down`` then ``stack up`` finds the posts a replay
or retrain needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

import redis
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # documented, no __all__
from rich.console import Console

from modstream.serving.triton_repo import served_models
from modstream.stack import paths

STATE_FILE = "stack.json"
HOST = "127.0.0.1"
STOP_GRACE_S = 10.0
# The embedded broker (Tansu) holds a group join about one session and a killed worker's partitions
# for its session: what `stack up` tells a user to run workers with, and what the chaos runs use.
# The production default (6 s, workers/config.py) stays right for Apache Kafka's session floor.
EMBEDDED_SESSION_TIMEOUT_S = 1.0
EMBEDDED_SETTINGS = {
    "MODSTREAM_SESSION_TIMEOUT_S": f"{EMBEDDED_SESSION_TIMEOUT_S:g}",
    "MODSTREAM_FEEDBACK_SESSION_TIMEOUT_S": f"{EMBEDDED_SESSION_TIMEOUT_S:g}",
}
REDIS_HINT = "redis-server is not on PATH: install it (apt-get install redis-server) or pass a reachable redis_url"
S3_BUCKET = "tansu"
S3_DIR = "s3"  # under the state dir: the durable broker's topics


class StackError(RuntimeError):
    """The stack could not be started."""


@dataclass(frozen=True)
class Endpoints:
    """Where the stack's servers listen. ``triton_grpc``/``triton_http`` are ``host:port`` (tritonclient's form)."""

    kafka_bootstrap: str
    redis_url: str
    triton_grpc: str
    triton_http: str
    triton_metrics: str  # full URL, for a Prometheus scrape
    redis_started: bool  # False when an external Redis is used
    s3_url: str | None = None  # the durable broker's S3 API (None: topics in memory)


@dataclass(frozen=True)
class Service:
    """A server process this stack started; its pid is also its process-group id."""

    name: str
    pid: int
    argv: tuple[str, ...]
    log: Path


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    pid: int | None  # None: not started by us (an external Redis)
    running: bool
    ready: bool


@dataclass(frozen=True)
class StackStatus:
    endpoints: Endpoints | None  # None: no stack recorded in the state dir
    services: tuple[ServiceStatus, ...]

    @property
    def up(self) -> bool:
        return self.endpoints is not None and all(s.running and s.ready for s in self.services)


def free_ports(count: int) -> list[int]:
    """Distinct TCP ports free right now on 127.0.0.1 (the usual small race until the servers bind them)."""
    with contextlib.ExitStack() as held:  # hold them all open, so the kernel cannot hand one out twice
        sockets = [held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in sockets:
            sock.bind((HOST, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def free_port() -> int:
    return free_ports(1)[0]


def create_topics(bootstrap: str, topics: Mapping[str, int], timeout: float = 10.0) -> None:
    """Create topics (name -> partitions); existing ones are left as they are."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics.items()],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    for name, future in futures.items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise StackError(f"creating topic {name!r} failed: {exc}") from exc


def s3_env(url: str) -> dict[str, str]:
    """What points Tansu's ``s3://`` engine at the S3 API at ``url`` (moto takes any key)."""
    return {
        "AWS_ENDPOINT": url,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "modstream",
        "AWS_SECRET_ACCESS_KEY": "modstream",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def _port_open(hostport: str) -> bool:
    host, port = hostport.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def _kafka_ready(bootstrap: str) -> bool:
    # The TCP check first keeps librdkafka from logging connection-refused errors while the broker starts.
    if not _port_open(bootstrap):
        return False
    try:
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=1.0)
    except KafkaException:
        return False
    return True


def _redis_ready(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0).ping())
    except (redis.RedisError, OSError):
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _triton_ready(http: str, models: tuple[str, ...]) -> bool:
    urls = [f"http://{http}/v2/health/ready", *(f"http://{http}/v2/models/{m}/ready" for m in models)]
    return _port_open(http) and all(_http_ok(url) for url in urls)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # Fields after the parenthesised command name: state, ppid, pgrp, ...
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue  # the process exited while we looked
        if int(pgrp) == pgid and state not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


# util-linux's setpriv (Essential in Debian) sets the kernel's parent-death signal, then execs the
# server: no Python runs between fork and exec, where a native thread's held malloc lock (librdkafka's)
# could deadlock a preexec_fn.
SETPRIV = os.path.realpath(found) if (found := shutil.which("setpriv")) else None  # resolved, as /proc shows exe


def tied(argv: list[str]) -> list[str]:
    """``argv`` run so that the server gets SIGTERM when this process dies. Only from the main thread:
    the kernel sends it when the spawning *thread* exits, and a fault thread's restart would end at once."""
    if SETPRIV is None or threading.current_thread() is not threading.main_thread():
        return argv
    return [SETPRIV, "--pdeathsig", "TERM", "--", *argv]


def _is_ours(service: Service) -> bool:
    """False only when the pid now belongs to another program (pid reuse after our server exited)."""
    try:
        # exe, not cmdline: redis-server rewrites its process title.
        exe = os.readlink(f"/proc/{service.pid}/exe")
    except FileNotFoundError:
        return True  # leader gone or a zombie: what is left in its group is ours (the pgid is not reusable)
    except OSError:
        return False  # another user's process
    # setpriv for the moment before it execs a tied server
    return exe.removesuffix(" (deleted)") in (os.path.realpath(service.argv[0]), SETPRIV)


def _log_excerpt(path: Path, errors: int = 10, tail: int = 20) -> str:
    """The first error lines and the last lines of a server log (tritonserver ends with tables)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    first_errors = [line for line in lines[:-tail] if "error" in line.lower()][:errors]
    return "\n".join([*first_errors, *(["..."] if first_errors else []), *lines[-tail:]])


class LocalStack:
    """Start, stop and inspect the embedded stack kept in ``state_dir``.

    ``model_repo`` is a Triton model repository (``build_repo("cpu-embedded", ...)``); readiness also
    waits for every model it holds (``spam_text``, and a challenger's ``spam_text_shadow`` where there is
    one). None starts no tritonserver, for a text model served elsewhere (a GPU host's). Redis: a
    reachable ``redis_url`` (or ``$MODSTREAM_REDIS_URL``) is used as is, otherwise
    a private ``redis-server`` is started.
    """

    def __init__(
        self,
        state_dir: Path,
        model_repo: Path | None,
        redis_url: str | None = None,
        *,
        kafka_storage: str = "memory://tansu/",
        kafka_env: Mapping[str, str] | None = None,
        durable: bool = False,
        console: Console | None = None,
    ) -> None:
        # Absolute: the paths are persisted and handed to servers that run in state_dir.
        self.state_dir = state_dir.absolute()
        self.model_repo = model_repo.absolute() if model_repo else None
        self.redis_url = redis_url or os.environ.get("MODSTREAM_REDIS_URL")
        # s3://bucket/ (with kafka_env naming the S3 endpoint, see S3Standin) for a broker that survives restarts
        if durable and (kafka_storage != "memory://tansu/" or kafka_env):
            raise ValueError("a durable stack runs its own S3 storage: pass durable or kafka_storage, not both")
        self.durable = durable
        self.kafka_storage = f"s3://{S3_BUCKET}/" if durable else kafka_storage
        self.kafka_env = dict(kafka_env or {})
        self.console = console or Console(stderr=True)
        self._procs: dict[int, subprocess.Popen[bytes]] = {}  # handles of servers started by this object
        self._tied = False  # whether the servers it starts die with this process (a ``with`` block's do)

    def __enter__(self) -> Endpoints:
        return self.up(tied=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.down()

    # -- state -------------------------------------------------------------------------------------

    @property
    def _state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    def _save(self, endpoints: Endpoints, services: list[Service], models: tuple[str, ...]) -> None:
        state = {
            "endpoints": asdict(endpoints),
            "services": [{**asdict(s), "argv": list(s.argv), "log": str(s.log)} for s in services],
            "models": list(models),
        }
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self._state_path)

    def _load(self) -> tuple[Endpoints, list[Service], tuple[str, ...]] | None:
        try:
            state = json.loads(self._state_path.read_text())
        except FileNotFoundError:
            return None
        services = [
            Service(name=s["name"], pid=s["pid"], argv=tuple(s["argv"]), log=Path(s["log"])) for s in state["services"]
        ]
        return Endpoints(**state["endpoints"]), services, tuple(state["models"])

    # -- lifecycle ---------------------------------------------------------------------------------

    def up(self, timeout: float = 120.0, *, tied: bool = False) -> Endpoints:
        """Start the servers (or return the running stack's endpoints) and wait until all are ready;
        ``tied``: servers this call starts get SIGTERM when this process dies (see :func:`tied`)."""
        if self._load() is not None:
            current = self.status()
            if current.up and current.endpoints is not None:
                self.console.log(f"stack already up (state in {self.state_dir})")
                return current.endpoints
            self.down()  # a half-dead stack from an earlier run
        if self.model_repo is not None and not self.model_repo.is_dir():
            raise StackError(f"model repository {self.model_repo} does not exist (see modstream build-repo)")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._tied = tied
        started = time.monotonic()

        external_redis = self.redis_url if self.redis_url and _redis_ready(self.redis_url) else None
        if self.redis_url and external_redis is None:
            self.console.log(f"[yellow]Redis at {self.redis_url} is unreachable; starting a private one")
        kafka, redis_port, grpc, http, metrics, s3 = free_ports(6)
        endpoints = Endpoints(
            kafka_bootstrap=f"{HOST}:{kafka}",
            redis_url=external_redis or f"redis://{HOST}:{redis_port}/0",
            triton_grpc=f"{HOST}:{grpc}",
            triton_http=f"{HOST}:{http}",
            triton_metrics=f"http://{HOST}:{metrics}/metrics",
            redis_started=external_redis is None,
            s3_url=f"http://{HOST}:{s3}" if self.durable else None,
        )
        models = served_models(self.model_repo) if self.model_repo else ()
        commands = {
            **({"s3": (self._s3_argv(s3), None)} if self.durable else {}),
            "kafka": (self._kafka_argv(kafka), self._kafka_env(endpoints)),
            **({"redis": (self._redis_argv(redis_port), None)} if external_redis is None else {}),
            **(
                {"triton": (self._triton_argv(self.model_repo, grpc, http, metrics), self._triton_env())}
                if self.model_repo
                else {}
            ),
        }
        services: list[Service] = []
        try:
            for name, (argv, env) in commands.items():
                services.append(self._spawn(name, argv, env))
                self._save(endpoints, services, models)  # at once, so down() can clean up a failed up()
                if name == "s3":  # Tansu reads its cluster's state from S3 as it starts
                    self._wait_ready(endpoints, services, models, started + timeout, only=("s3",))
            self._wait_ready(endpoints, services, models, started + timeout)
        except BaseException:
            self.down()
            raise
        self.console.log(f"stack up in {time.monotonic() - started:.1f}s (state in {self.state_dir})")
        return endpoints

    def down(self) -> None:
        """Stop the servers recorded in the state dir: SIGTERM, then SIGKILL after a grace period."""
        loaded = self._load()
        if loaded is None:
            return
        ours = [s for s in loaded[1] if _is_ours(s)]
        self._signal(ours, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and any(self._running(s) for s in ours):
            time.sleep(0.1)
        self._signal([s for s in ours if self._running(s)], signal.SIGKILL)
        for service in ours:
            proc = self._procs.pop(service.pid, None)
            if proc is not None:
                proc.wait()
        self._state_path.unlink(missing_ok=True)

    def restart(self, name: str, sig: signal.Signals = signal.SIGKILL, pause_s: float = 0.0) -> float:
        """Stop one server with ``sig``, start it again as it was (after ``pause_s``) and wait until
        it is ready; returns when it was stopped (epoch seconds). For fault injection."""
        loaded = self._load()
        if loaded is None:
            raise StackError("no stack is up")
        endpoints, services, models = loaded
        old = next(s for s in services if s.name == name)
        stopped = time.time()
        self._signal([old], sig)
        while self._running(old):
            time.sleep(0.02)
        proc = self._procs.pop(old.pid, None)
        if proc is not None:
            proc.wait()
        time.sleep(pause_s)
        env = {"kafka": self._kafka_env(endpoints), "triton": self._triton_env()}
        new = self._spawn(name, list(old.argv), env.get(name))
        services = [new if s is old else s for s in services]
        self._save(endpoints, services, models)
        self._wait_ready(endpoints, services, models, time.monotonic() + 120)
        return stopped

    def status(self) -> StackStatus:
        """What runs and answers, from the state dir (works from any process)."""
        loaded = self._load()
        if loaded is None:
            return StackStatus(endpoints=None, services=())
        endpoints, services, models = loaded
        by_name = {s.name: s for s in services}
        statuses = tuple(
            ServiceStatus(
                name=name,
                pid=service.pid if service else None,
                running=service is None or self._running(service),
                ready=check(),
            )
            for name, check in self._checks(endpoints, models).items()
            for service in [by_name.get(name)]
        )
        return StackStatus(endpoints=endpoints, services=statuses)

    # -- processes ---------------------------------------------------------------------------------

    def _kafka_argv(self, port: int) -> list[str]:
        url = f"tcp://{HOST}:{port}"
        return [
            str(paths.tansu_bin()), "broker",
            "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", self.kafka_storage,
        ]  # fmt: skip

    def _kafka_env(self, endpoints: Endpoints) -> dict[str, str] | None:
        extra = {**self.kafka_env, **(s3_env(endpoints.s3_url) if endpoints.s3_url else {})}
        return {**os.environ, **extra} if extra else None

    def _s3_argv(self, port: int) -> list[str]:
        return [
            sys.executable, "-m", "modstream.stack.s3store",
            "--dir", str(self.state_dir / S3_DIR), "--host", HOST, "--port", str(port), "--bucket", S3_BUCKET,
        ]  # fmt: skip

    def _redis_argv(self, port: int) -> list[str]:
        server = shutil.which("redis-server")
        if server is None:
            raise StackError(REDIS_HINT)
        # A throwaway cache: no RDB snapshots, no AOF.
        return [server, "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no"]

    def _triton_argv(self, repo: Path, grpc: int, http: int, metrics: int) -> list[str]:
        return [
            str(paths.tritonserver_bin()),
            f"--model-repository={repo}",
            f"--backend-directory={self._backend_dir()}",
            # Explicit control, every model at start: `models promote` loads a text model's version into it.
            "--model-control-mode=explicit",
            "--load-model=*",
            "--strict-readiness=true",
            "--exit-on-error=true",
            "--disable-auto-complete-config",  # the configs are complete; no guessing
            "--exit-timeout-secs=5",
            f"--grpc-address={HOST}", f"--grpc-port={grpc}",
            f"--http-address={HOST}", f"--http-port={http}",
            f"--metrics-address={HOST}", f"--metrics-port={metrics}",
            # CPU only: no GPU metrics, no pinned or CUDA memory pools.
            "--allow-gpu-metrics=false",
            "--pinned-memory-pool-byte-size=0",
            "--cuda-memory-pool-byte-size=0:0",
            # Python-backend shared memory is named by prefix; a per-stack one lets stacks coexist.
            f"--backend-config=python,shm-region-prefix-name=modstream_{grpc}_",
        ]  # fmt: skip

    def _triton_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(paths.pytriton_libs_dir()), env.get("LD_LIBRARY_PATH")) if p
        )
        # The Python stub takes its sys.prefix from python3 on PATH (it ignores PYTHONPATH).
        env["PATH"] = os.pathsep.join((str(paths.python_env_bin()), env.get("PATH", "")))
        return env

    def _backend_dir(self) -> Path:
        """``<state>/backends/python``: the Python backend with the stub for this interpreter."""
        python_dir = self.state_dir / "backends" / "python"
        python_dir.mkdir(parents=True, exist_ok=True)
        for source in (paths.python_backend_lib(), paths.python_backend_utils(), paths.python_backend_stub()):
            link = python_dir / source.name
            link.unlink(missing_ok=True)
            link.symlink_to(source)
        return python_dir.parent

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None) -> Service:
        log = self.state_dir / f"{name}.log"
        run = tied(argv) if self._tied else argv
        with log.open("wb") as out:
            proc = subprocess.Popen(
                run, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                cwd=self.state_dir, start_new_session=True,
            )  # fmt: skip
        self._procs[proc.pid] = proc
        return Service(name=name, pid=proc.pid, argv=tuple(argv), log=log)

    @staticmethod
    def _running(service: Service) -> bool:
        # The group, not just the leader: tritonserver's Python stubs must be gone too.
        return _is_ours(service) and bool(group_members(service.pid))

    def _signal(self, services: list[Service], sig: signal.Signals) -> None:
        for service in services:
            with contextlib.suppress(ProcessLookupError):  # already gone
                os.killpg(service.pid, sig)

    # -- readiness ---------------------------------------------------------------------------------

    @staticmethod
    def _checks(endpoints: Endpoints, models: tuple[str, ...]) -> dict[str, Callable[[], bool]]:
        s3 = endpoints.s3_url
        return {
            **({"s3": lambda: _port_open(s3.removeprefix("http://"))} if s3 else {}),
            "kafka": lambda: _kafka_ready(endpoints.kafka_bootstrap),
            "redis": lambda: _redis_ready(endpoints.redis_url),
            **({"triton": lambda: _triton_ready(endpoints.triton_http, models)} if models else {}),
        }

    def _wait_ready(
        self,
        endpoints: Endpoints,
        services: list[Service],
        models: tuple[str, ...],
        deadline: float,
        only: tuple[str, ...] | None = None,
    ) -> None:
        pending = {n: c for n, c in self._checks(endpoints, models).items() if only is None or n in only}
        by_name = {s.name: s for s in services}
        start = time.monotonic()
        with self.console.status("starting the stack") as progress:
            while pending:
                for name, check in list(pending.items()):
                    if check():
                        del pending[name]
                        self.console.log(f"{name} ready ({time.monotonic() - start:.1f}s)")
                for name in pending:
                    service = by_name.get(name)
                    if service is not None and not self._running(service):
                        raise StackError(f"{name} exited during startup; {service.log}:\n{_log_excerpt(service.log)}")
                if not pending:
                    break
                if time.monotonic() > deadline:
                    tails = "\n".join(
                        f"--- {by_name[n].log}:\n{_log_excerpt(by_name[n].log)}" for n in pending if n in by_name
                    )
                    raise StackError(f"not ready before the deadline: {', '.join(pending)}\n{tails}")
                progress.update(f"waiting for {', '.join(pending)}")
                time.sleep(0.1)


class S3Standin:
    """moto's S3 server (PyPI ``moto[server]``) on a free port with one bucket: durable storage
    for Tansu (``s3://<bucket>/``) that outlives the broker. ``kafka_env`` points Tansu at it."""

    def __init__(self, state_dir: Path, bucket: str = "tansu") -> None:
        self.state_dir, self.bucket = state_dir, bucket
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def kafka_env(self) -> dict[str, str]:
        return s3_env(self.url)

    def __enter__(self) -> S3Standin:
        server = shutil.which("moto_server", path=os.pathsep.join((str(paths.python_env_bin()), os.environ["PATH"])))
        if server is None:
            raise StackError("moto_server is not installed: pip install 'moto[server]'")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with (self.state_dir / "s3.log").open("wb") as out:
            self._proc = subprocess.Popen(
                tied([server, "-H", HOST, "-p", str(self.port)]),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while not _port_open(f"{HOST}:{self.port}"):
            if time.monotonic() > deadline or self._proc.poll() is not None:
                raise StackError(f"moto_server did not start; see {self.state_dir / 's3.log'}")
            time.sleep(0.1)
        request = urllib.request.Request(f"{self.url}/{self.bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            self._proc.wait(STOP_GRACE_S)
