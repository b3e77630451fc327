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
        self,
        name: str,
        kubeconfig: Path,
        log_dir: Path,
        *flags: str,
        log_name: str = "",
        log_level: str = "DEBUG",
    ) -> None:
        self.name = name
        self.log_level = log_level
        self.kubeconfig = kubeconfig
        self.log_path = log_dir / f"{log_name or name}.log"
        self.flags = list(flags)
        self.proc: subprocess.Popen[bytes] | None = None
        self._read_to = 0  # `said`: bytes of the log already searched
        self._run_from = 0  # `said`: where the current run's log begins
        self._said: set[str] = set()

    def start(self) -> OperatorProcess:
        cmd = [
            sys.executable,
            "-m",
            "operators",
            self.name,
            f"--kubeconfig={self.kubeconfig}",
            f"--log-level={self.log_level}",
            *self.flags,
        ]
        with self.log_path.open("ab") as out:
            out.write(f"\n$ {' '.join(cmd)}\n".encode())
            out.flush()
            # A restarted process must say its marks again: the last run's line is not this one's.
            self._run_from = self._read_to = out.tell()
            self._said.clear()
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

    def said(self, text: str) -> bool:
        """Whether the log of the current run (since the last `start`) contains `text`. Reads only
        what was appended since the last call: a DEBUG log of a large cluster grows by hundreds of
        lines a second, so a start-up mark soon leaves any tail of it and re-reading it whole costs
        seconds."""
        if text in self._said:
            return True
        if not self.log_path.exists():
            return False
        with self.log_path.open("rb") as f:
            start = max(self._run_from, self._read_to - len(text.encode()))
            f.seek(start)
            chunk = f.read()
        self._read_to = start + len(chunk)
        if text.encode() in chunk:
            self._said.add(text)
        return text in self._said
