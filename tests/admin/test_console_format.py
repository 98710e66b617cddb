"""console-consumer --format: kcat's -f fields and escapes."""

from __future__ import annotations

import pytest

from metaq.cli.console_consumer import KcatFormat, Printed
from metaq.errors import ConfigError

MESSAGE = Printed("clicks", 2, 41, 1700000000123, b"k1", "v\u00e9".encode(), (("h", b"x"), ("n", None)))


@pytest.mark.parametrize(("fmt", "line"), [
    ("%t %p %o %k %s\\n", "clicks 2 41 k1 v\u00e9\n"),
    ("%T|%K|%S|%h|100%%\\t\\r\\\\", "1700000000123|2|3|h=x,n=|100%\t\r\\"),
    ("plain", "plain"),  # no line break unless asked, as kcat
])
def test_fields_and_escapes(fmt: str, line: str) -> None:
    assert KcatFormat.parse(fmt).render(MESSAGE) == line


def test_null_key_and_value() -> None:
    empty = Printed("t", 0, 0, 0, None, None)
    assert KcatFormat.parse("[%k][%K][%s][%S]").render(empty) == "[][-1][][-1]"


@pytest.mark.parametrize("fmt", ["%x", "\\q"])
def test_unknown_tokens_are_refused(fmt: str) -> None:
    with pytest.raises(ConfigError, match="unknown"):
        KcatFormat.parse(fmt)
