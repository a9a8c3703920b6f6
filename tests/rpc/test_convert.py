"""Domain values convert to the exact protobuf values a generic conversion would give."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import timestamp_pb2
from hypothesis import given
from hypothesis import strategies as st

from callgate.server.rpc.convert import timestamp


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    )
)
def test_timestamp_matches_from_datetime(value: datetime) -> None:
    """The fast Timestamp conversion equals Timestamp.FromDatetime to the nanosecond."""
    expected = timestamp_pb2.Timestamp()
    expected.FromDatetime(value)
    assert timestamp(value) == expected
