"""How rates and durations read on the console (hypernet/training/console.py)."""
import pytest

from hypernet.training import console


@pytest.mark.parametrize("rate, text", [
    (123.4, "123 steps/s"), (10.0, "10 steps/s"), (3.44, "3.4 steps/s"),
    (0.287, "0.29 steps/s"), (0.0, "0 steps/s")])
def test_slow_rates_keep_two_significant_digits(rate, text):
  assert console.format_rate(rate) == text


@pytest.mark.parametrize("seconds, text", [
    (0.4, "0s"), (59.4, "59s"), (60, "1m 00s"), (725, "12m 05s"), (3599.6, "1h 00m"),
    (7385, "2h 03m"), (-3, "0s")])
def test_durations_read_in_hours_minutes_and_seconds(seconds, text):
  assert console.format_duration(seconds) == text
