"""Errors that carry a stable code, so scripts and the HTTP API can branch on them."""

from __future__ import annotations


class KirocrewError(Exception):
    """An expected failure with a stable machine-readable ``code``.

    ``exit_code`` is what the CLI exits with: 2 for bad input or a malformed
    file (nothing was changed), 1 for a failed check or operation.
    """

    code = "error"
    exit_code = 1

    def __init__(self, message: str, *, code: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code

    def as_dict(self) -> dict[str, str]:
        return {"error": self.message, "code": self.code}


class BadInputError(KirocrewError):
    """The caller asked for something malformed or unknown; nothing was changed."""

    code = "bad_input"
    exit_code = 2


class ConflictError(KirocrewError):
    """The request is sound but clashes with what is happening now (one already running, say); retry later."""

    code = "conflict"
    exit_code = 1


class MalformedFileError(KirocrewError):
    """A file we must read is not valid; it was left exactly as it was."""

    code = "malformed_file"
    exit_code = 2

    def __init__(self, path: object, detail: str, *, line: int | None = None, code: str | None = None):
        where = f"{path}:{line}" if line else f"{path}"
        super().__init__(f"{where}: {detail}", code=code)
        self.path = path
        self.line = line
        self.detail = detail


class UnreadableFileError(KirocrewError):
    """A file exists but could not be read (permissions, I/O error); treat as unknowable."""

    code = "unreadable_file"
    exit_code = 1
