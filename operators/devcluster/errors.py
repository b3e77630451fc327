"""The one error type the dev cluster raises: it always says what went wrong and how to fix it."""

from __future__ import annotations


class DevClusterError(RuntimeError):
    """A failure a user can act on; `hint` says how."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\n  how to fix: {self.hint}" if self.hint else base
