"""S3 for the embedded broker that outlives ``stack down``: moto's S3 server in this process, its
buckets written to a file when it stops and read back when it starts.

Tansu's ``s3://`` engine needs conditional writes (``If-Match``/``If-None-Match``) to keep
concurrent produce requests from overwriting each other; moto honours them, s3rver (S3 over
files) does not and lost records that way, so moto serves and pickle keeps its state. The state is
saved on SIGTERM or SIGINT (``stack down``), after the server stops taking requests; a SIGKILL
loses what was written since the last start.

    python -m modstream.stack.s3store --dir DIR --host HOST --port PORT --bucket NAME
"""

from __future__ import annotations

import argparse
import logging
import pickle
import signal
import threading
from pathlib import Path

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.s3.models import S3Backend, s3_backends
from moto.server import ThreadedMotoServer

STATE = "buckets.pickle"


def backend() -> S3Backend:
    backend: S3Backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    return backend


def load(state: Path) -> None:
    if state.is_file():
        backend().buckets = pickle.loads(state.read_bytes())


def save(state: Path) -> None:
    tmp = state.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(backend().buckets))
    tmp.replace(state)  # a stop cut short leaves the last whole state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", required=True)
    args = parser.parse_args()
    state = args.dir / STATE
    args.dir.mkdir(parents=True, exist_ok=True)
    load(state)
    if args.bucket not in backend().buckets:
        backend().create_bucket(args.bucket, "us-east-1")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line a request: the broker polls
    server = ThreadedMotoServer(args.host, args.port, verbose=False)
    server.start()
    try:
        stop.wait()
    finally:
        server.stop()  # no request half done while the state is written
        save(state)


if __name__ == "__main__":
    main()
