from workers.commit import settle
from workers.records import InMsg


def _msgs(*spec: tuple[int, int]) -> list[InMsg]:
    return [InMsg("posts", p, o, None, b"", 0.0) for p, o in spec]


def test_all_delivered_stores_next_offset_per_partition() -> None:
    s = settle(_msgs((0, 10), (1, 5), (0, 11), (1, 6)), undelivered=set())
    assert s.store == {("posts", 0): 12, ("posts", 1): 7}
    assert s.complete


def test_failure_holds_back_its_partition_from_the_failed_offset() -> None:
    msgs = _msgs((0, 10), (0, 11), (0, 12), (1, 5))
    s = settle(msgs, undelivered={1})  # offset 11 failed
    assert s.store == {("posts", 0): 11, ("posts", 1): 6}
    assert [m.offset for m in s.failed] == [11]
    assert not s.complete


def test_failure_on_first_message_stores_nothing_for_that_partition() -> None:
    s = settle(_msgs((0, 10), (0, 11)), undelivered={0})
    assert s.store == {}


def test_out_of_order_batch_is_settled_in_offset_order() -> None:
    s = settle(_msgs((0, 12), (0, 10), (0, 11)), undelivered={0})  # offset 12 failed
    assert s.store == {("posts", 0): 12}
