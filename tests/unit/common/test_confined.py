"""The confinement helper and the rules for registered names and version keys."""

import pytest

from services.common.confined import OutsideBase, within
from services.common.names import is_valid_registered_name, is_valid_version


def test_within_keeps_paths_inside_their_base(tmp_path):
    (tmp_path / "a").mkdir()
    assert within(tmp_path, "a", "1") == (tmp_path / "a" / "1").resolve()
    for bad in (("..", "x"), ("../../etc",), ("a/../..",), ("",), (".",)):
        with pytest.raises(OutsideBase):
            within(tmp_path, *bad)
    (tmp_path / "link").symlink_to("/etc")
    with pytest.raises(OutsideBase):
        within(tmp_path, "link", "passwd")


def test_registered_names_and_versions_follow_their_rules():
    assert is_valid_registered_name("minilm prod")
    for bad in ("", " x", "a/b", "a:b", "..", "a\nb", "x" * 257, None):
        assert not is_valid_registered_name(bad)
    assert (
        is_valid_version("12")
        and not is_valid_version("012")
        and not is_valid_version("../x")
        and not is_valid_version("1" * 10)
    )
