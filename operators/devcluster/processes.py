"""Start, watch and stop the cluster's processes; they outlive the CLI that started them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from operators.devcluster.errors import DevClusterError

# Popen handles of the processes this Python process started: holding them keeps Python from
# warning about (and losing track of) children that are meant to outlive a function call.
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int
    binary: str
    log: Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ensure_port_free(port: int, flag: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise DevClusterError(
                f"port {port} on 127.0.0.1 is in use ({exc.strerror})",
                f"stop what listens there (`ss -ltnp 'sport = :{port}'`), run `make cluster-down` "
                f"if it is an older dev cluster, or pick another port with {flag}",
            ) from exc


def spawn(name: str, args: list[str], log: Path, env: Mapping[str, str] | None = None) -> Proc:
    """Run in a new session so the process survives us and can be stopped as a group."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"$ {' '.join(args)}\n".encode())
        out.flush()
        popen = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else dict(env),
        )
    _children[popen.pid] = popen
    return Proc(name=name, pid=popen.pid, binary=args[0], log=log)


def alive(proc: Proc) -> bool:
    """True while the pid still runs our binary (a recycled pid is not ours)."""
    child = _children.get(proc.pid)
    if child is not None:
        return child.poll() is None
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(proc.pid, os.WNOHANG)
        return False
    if not cmdline:
        return True  # between fork and exec: the binary is not in place yet
    return cmdline.split(b"\0", 1)[0].decode(errors="replace") == proc.binary


def log_tail(proc: Proc, lines: int = 20) -> str:
    try:
        text = proc.log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def stop(proc: Proc, grace: float = 10.0) -> None:
    if not alive(proc):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(proc):
        time.sleep(0.1)
    if alive(proc):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.2)
    child = _children.pop(proc.pid, None)
    if child is not None:
        child.wait(timeout=5)
