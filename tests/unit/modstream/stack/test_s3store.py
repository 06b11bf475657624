"""The durable broker's S3 server keeps its buckets across a stop and a start."""

from pathlib import Path

from modstream.stack import s3store


def test_buckets_are_saved_on_stop_and_read_back_on_start(tmp_path: Path) -> None:
    state = tmp_path / s3store.STATE
    backend = s3store.backend()
    saved = dict(backend.buckets)
    try:
        backend.buckets = {}
        backend.create_bucket("kept", "us-east-1")
        backend.put_object("kept", "topics/posts/0.batch", b"records")
        s3store.save(state)

        backend.buckets = {}  # a new process: nothing in memory
        s3store.load(state)

        key = backend.get_object("kept", "topics/posts/0.batch")
        assert key is not None and key.value == b"records"
        assert not state.with_suffix(".tmp").exists()
    finally:
        backend.buckets = saved


def test_a_first_start_has_nothing_to_read(tmp_path: Path) -> None:
    backend = s3store.backend()
    before = dict(backend.buckets)
    s3store.load(tmp_path / s3store.STATE)
    assert backend.buckets == before
