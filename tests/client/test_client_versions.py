"""Version negotiation: the highest version both sides speak."""

from __future__ import annotations

import pytest

from metaq.client.versions import CLIENT_VERSIONS, ApiKey, pick_version
from metaq.errors import UnsupportedVersionError


def test_ranges_match_the_brief():
    assert CLIENT_VERSIONS[ApiKey.PRODUCE] == (3, 7)
    assert CLIENT_VERSIONS[ApiKey.FETCH] == (4, 11)
    assert CLIENT_VERSIONS[ApiKey.LIST_OFFSETS] == (1, 2)
    assert CLIENT_VERSIONS[ApiKey.METADATA] == (1, 4)
    assert CLIENT_VERSIONS[ApiKey.API_VERSIONS] == (0, 3)
    assert CLIENT_VERSIONS[ApiKey.FIND_COORDINATOR] == (0, 2)
    assert CLIENT_VERSIONS[ApiKey.OFFSET_COMMIT] == (2, 7)
    assert CLIENT_VERSIONS[ApiKey.OFFSET_FETCH] == (1, 5)


@pytest.mark.parametrize(("broker", "expected"), [
    ((0, 13), 7),   # newer broker: our maximum
    ((3, 7), 7),
    ((0, 5), 5),    # older broker: its maximum
    ((3, 3), 3),
    ((7, 9), 7),
])
def test_highest_common_version(broker, expected):
    assert pick_version(ApiKey.PRODUCE, {ApiKey.PRODUCE: broker}) == expected


@pytest.mark.parametrize("broker", [(0, 2), (8, 13)])
def test_no_overlap(broker):
    with pytest.raises(UnsupportedVersionError, match="PRODUCE"):
        pick_version(ApiKey.PRODUCE, {ApiKey.PRODUCE: broker})


def test_api_missing_on_either_side():
    with pytest.raises(UnsupportedVersionError, match="does not offer"):
        pick_version(ApiKey.FETCH, {ApiKey.PRODUCE: (0, 9)})
    with pytest.raises(UnsupportedVersionError, match="metaq's client"):
        pick_version(11, {11: (0, 5)})  # JoinGroup: not spoken by metaq's client
