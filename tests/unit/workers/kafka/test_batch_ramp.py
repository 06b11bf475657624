import pytest

from workers.kafka.batch_ramp import BatchRamp


def test_starts_small_doubles_per_batch_and_stays_at_the_max() -> None:
    ramp = BatchRamp(16, 100)
    sizes = []
    for _ in range(5):
        sizes.append(ramp.size)
        ramp.polled(ramp.size)
    assert sizes == [16, 32, 64, 100, 100]


def test_idle_polls_do_not_grow_it_and_an_assignment_resets_it() -> None:
    ramp = BatchRamp(8, 256)
    ramp.polled(0)
    assert ramp.size == 8
    ramp.polled(3)
    assert ramp.size == 16
    ramp.reset()
    assert ramp.size == 8


def test_a_start_above_the_max_is_refused() -> None:
    with pytest.raises(ValueError, match="start"):
        BatchRamp(300, 256)
