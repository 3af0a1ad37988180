"""``fake-kiro-cli``: a faithful fake of kiro-cli 2.x for tests, speaking real ACP v1.

It imitates kiro-cli 2.15.0 (``switches.IMITATED_VERSION``): its command line,
its ACP agent with kiro's extensions and quirks, session files and locks, and
real MCP connections. Tests drive it with the scripted prompt language of
:mod:`.script` and the ``KIRO_FAKE_*`` switches of :mod:`.switches`; see
``docs/testing/fake-kiro-cli.md``.
"""

from kirocrew_testing.fake_kiro.switches import IMITATED_VERSION

__all__ = ["IMITATED_VERSION"]
