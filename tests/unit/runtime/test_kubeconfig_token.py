"""The in-cluster service-account token is read once and re-read only when the file changes."""

from __future__ import annotations

import os
import pathlib

from operators.runtime import kubeconfig

# ---- the service-account token file is not read on every request --------------------


def test_token_file_is_cached_until_it_changes(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    stamp = token.stat().st_mtime_ns
    conn = kubeconfig.Connection(server="https://x", token_file=str(token))
    assert conn.bearer_token() == "one"
    token.write_text("owt\n")  # same size, mtime put back: not re-read
    os.utime(token, ns=(stamp, stamp))
    assert conn.bearer_token() == "one"
    os.utime(token, ns=(stamp + 10**9, stamp + 10**9))  # rotated
    assert conn.bearer_token() == "owt"
    token.write_text("new\n")
    os.utime(token, ns=(stamp + 10**9, stamp + 10**9))
    conn._token_cache.max_age = 0.0  # the periodic re-read catches an unchanged stamp too
    assert conn.bearer_token() == "new"
