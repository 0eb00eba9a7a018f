"""SendMessageRequestHeader.from_v2_ext_fields (the broker's per-message decode) agrees
with the generic, table-driven SendMessageRequestHeaderV2 for any numeric text."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.protocol import headers as H
from rmq.protocol.headers import HeaderFieldError

_numbers = st.one_of(
    st.integers(-5, 5000).map(str),
    st.integers(-(2**63), 2**63).map(str),
    st.sampled_from(["", "00", "007", "+1", "-0", " 1", "1 ", "１", "4096", "4095", "2147483648", "x", "9" * 30]),
)


@settings(max_examples=500, deadline=None)
@given(st.fixed_dictionaries({k: _numbers for k in "defghjl"}))
def test_fast_decode_agrees_with_the_generic_v2_header(nums: dict[str, str]) -> None:
    ext = {"a": "pg", "b": "TopicA", "c": "TBW102", **nums, "i": "WAIT\x01true\x02", "k": "false"}
    try:
        expected = H.SendMessageRequestHeaderV2.from_ext_fields(ext).to_v1()
    except HeaderFieldError as e:
        with pytest.raises(HeaderFieldError) as fast_error:
            H.SendMessageRequestHeader.from_v2_ext_fields(ext)
        assert fast_error.value.field == e.field
        return
    assert H.SendMessageRequestHeader.from_v2_ext_fields(ext) == expected
