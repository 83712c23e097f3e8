"""SliceLaunch: how widely to train on Ray, checked before anything is claimed (no Ray needed here)."""

import pytest

from meltemi.trainer.launch import SliceLaunch


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"slices": 0}, "slices must be at least 1, got 0"),
        ({"devices_per_host": 0}, "devices_per_host must be at least 1, got 0"),
        ({"min_slices": 3}, r"min_slices must be between 1 and slices \(2\), got 3"),
        ({"min_slices": 0}, r"min_slices must be between 1 and slices \(2\), got 0"),
        ({"max_retries_failure": -1}, "max_retries_failure must not be negative, got -1"),
        ({"scale_up_interval_s": 0.0}, "scale_up_interval_s must be positive, got 0.0"),
        ({"drain_timeout_s": -5.0}, "drain_timeout_s must be positive, got -5.0"),
        ({"acquire_timeout_s": 0.0}, "acquire_timeout_s must be positive, got 0.0"),
    ],
)
def test_a_bad_launch_is_an_error_naming_the_field(options, message):
    with pytest.raises(ValueError, match=message):
        SliceLaunch(**{"slice_type": "cpu-1", "slices": 2, **options})


def test_min_slices_lists_every_count_the_job_accepts():
    assert SliceLaunch("cpu-1", 4, min_slices=2).slice_counts() == [2, 3, 4]
    assert SliceLaunch("cpu-1", 4).slice_counts() == 4
    assert SliceLaunch("cpu-1", 4, min_slices=4).slice_counts() == 4
