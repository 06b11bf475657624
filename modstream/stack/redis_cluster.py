"""A real Redis Cluster on loopback for tests and measurements: three primaries, three replicas.

Six ``redis-server --cluster-enabled yes`` processes on free ports, joined by
``redis-cli --cluster create ... --cluster-replicas 1``; ready once every node reports
``cluster_state:ok``. Throwaway: no persistence, everything under ``state_dir``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import redis

from modstream.stack.local import HOST, REDIS_HINT, StackError, free_ports

NODES = 6  # three primaries, each with one replica: the smallest cluster `--cluster create` makes with replicas


class LocalRedisCluster:
    def __init__(self, state_dir: Path, nodes: int = NODES) -> None:
        self.state_dir = state_dir
        # Each node also listens on a cluster-bus port: chosen too, rather than Redis's port + 10000.
        ports = free_ports(2 * nodes)
        self.ports, self.bus_ports = ports[:nodes], ports[nodes:]
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """Any node will do: the cluster client discovers the others."""
        return f"redis://{HOST}:{self.ports[0]}/0"

    def __enter__(self) -> str:
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self.url

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.down()

    def up(self, timeout: float = 60.0) -> None:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            raise StackError(REDIS_HINT)
        for port, bus in zip(self.ports, self.bus_ports, strict=True):
            node_dir = self.state_dir / str(port)
            node_dir.mkdir(parents=True, exist_ok=True)
            argv = [
                server, "--bind", HOST, "--port", str(port), "--dir", str(node_dir),
                "--cluster-enabled", "yes", "--cluster-port", str(bus), "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no",
            ]  # fmt: skip
            log = (node_dir / "redis.log").open("wb")
            self._procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        clients = [redis.Redis(host=HOST, port=p, socket_timeout=1.0, socket_connect_timeout=1.0) for p in self.ports]
        self._wait(lambda: all(_answers(c) for c in clients), timeout, "the Redis nodes to start")
        create = [cli, "--cluster", "create", *(f"{HOST}:{p}" for p in self.ports)]
        done = subprocess.run(
            [*create, "--cluster-replicas", "1", "--cluster-yes"], capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise StackError(f"redis-cli --cluster create failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        self._wait(lambda: all(_cluster_ok(c) for c in clients), timeout, "the Redis Cluster to be ok")
        for c in clients:
            c.close()

    def down(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._procs.clear()

    def _wait(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise StackError(f"timed out waiting for {what} (logs under {self.state_dir})")
            if any(p.poll() is not None for p in self._procs):
                raise StackError(f"a redis-server exited while waiting for {what} (logs under {self.state_dir})")
            time.sleep(0.1)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


def _cluster_ok(client: redis.Redis) -> bool:
    try:
        info = client.cluster("INFO")  # parsed by redis-py into a dict
        return bool(info.get("cluster_state") == "ok")
    except (redis.RedisError, OSError):
        return False
