"""Start, watch and stop the cluster's processes.

Started for the CLI (`make cluster-up`), they outlive it: that is what the CLI is for. Started
by a test or a benchmark, they must die with it, even when it is SIGKILLed (pytest under
`timeout`, a cancelled CI job): otherwise etcd, kube-apiserver and kwok keep running for hours
on a shared machine. `spawn(..., die_with_parent=True)` asks the kernel for that
(PR_SET_PDEATHSIG): the child gets SIGKILL when the thread that started it ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from operators.devcluster.errors import DevClusterError

# Popen handles of the processes this Python process started: holding them keeps Python from
# warning about (and losing track of) children that are meant to outlive a function call.
_children: dict[int, subprocess.Popen[bytes]] = {}
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Loaded here, not in the forked child: dlopen there could wait on a lock another thread held.
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


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


def dies_with_parent() -> Callable[[], None]:
    """A Popen preexec_fn: SIGKILL the child when the thread calling Popen ends.

    Safe beside other threads (what ruff's PLW1509 warns about): between fork and exec it only
    makes two system calls through a function loaded beforehand; no import, lock or logging."""
    parent = os.getpid()

    def tie() -> None:
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl: no signal would come
            os._exit(1)

    return tie


def spawn(
    name: str,
    args: list[str],
    log: Path,
    env: Mapping[str, str] | None = None,
    *,
    die_with_parent: bool = False,
) -> Proc:
    """Run in a new session, so the process can be stopped as a group and a Ctrl-C in the
    terminal does not reach it. It outlives us unless `die_with_parent` (then start it from a
    thread that lives as long as the process should: the main thread)."""
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
            preexec_fn=dies_with_parent() if die_with_parent else None,  # noqa: PLW1509 - see dies_with_parent
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
