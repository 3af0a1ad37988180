"""The one refusal type of the computer-use chokepoint."""

from __future__ import annotations

from kirocrew_core.errors import KirocrewError


class Refusal(KirocrewError):
    """A call the chokepoint will not run; ``code`` is stable and audited.

    The MCP reply is an error result ``error[<code>]: <message>``; the CLI prints ``Error: <message>``
    and exits non-zero.
    """

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message, code=code, exit_code=1)
