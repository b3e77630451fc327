"""One `python -m operators <name>` subprocess for e2e tests: started, SIGKILLed and restarted
for real, its log kept and shown when a test fails. It dies with the test process (and with the
thread that started it)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path

from operators.devcluster.processes import dies_with_parent


class OperatorProcess:
    def __init__(
        self, name: str, kubeconfig: Path, log_dir: Path, *flags: str, log_name: str = ""
    ) -> None:
        self.name = name
        self.kubeconfig = kubeconfig
        self.log_path = log_dir / f"{log_name or name}.log"
        self.flags = list(flags)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        cmd = [
            sys.executable,
            "-m",
            "operators",
            self.name,
            f"--kubeconfig={self.kubeconfig}",
            "--log-level=DEBUG",
            *self.flags,
        ]
        with self.log_path.open("ab") as out:
            out.write(f"\n$ {' '.join(cmd)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=dies_with_parent(),  # noqa: PLW1509 - see dies_with_parent
            )
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)

    def stop(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.kill(signal.SIGTERM)
        self.kill(signal.SIGKILL)
        return self.proc.returncode if self.proc is not None else None

    def log(self, lines: int = 80) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
