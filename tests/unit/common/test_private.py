"""Files only their owner may read (`services.common.private`): a tree copied in with its source's modes."""

from __future__ import annotations

import os
import shutil
import stat

from services.common.private import private_tree


def test_a_copied_tree_loses_group_and_other_bits_and_keeps_its_owner_s(tmp_path):
    source = tmp_path / "wheel" / "backends"
    (source / "python").mkdir(parents=True)
    (source / "python" / "stub").write_text("#!/bin/sh\n")
    (source / "python" / "stub").chmod(0o755)
    (source / "python" / "utils.py").write_text("")
    (source / "python" / "utils.py").chmod(0o644)
    os.symlink("/etc/hostname", source / "python" / "link")
    copy = shutil.copytree(source, tmp_path / "run" / "backends", symlinks=True)
    assert stat.S_IMODE((copy / "python" / "utils.py").stat().st_mode) == 0o644, "copytree keeps the source's modes"
    private_tree(copy)
    modes = {str(p.relative_to(copy)): stat.S_IMODE(p.lstat().st_mode) for p in [copy, *copy.rglob("*")]}
    assert modes == {".": 0o700, "python": 0o700, "python/stub": 0o700, "python/utils.py": 0o600, "python/link": 0o777}
    assert stat.S_IMODE(os.stat("/etc/hostname").st_mode) & 0o004, "a link's target is left alone"
