"""The value types plugins return from hooks.

They are plain frozen dataclasses with no heavy imports, so a plugin module that
builds them stays cheap to import (``kirocrew --help`` loads every plugin).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

DoctorStatus = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class McpScope:
    """A provider-global MCP scope a companion edition adds (e.g. Claude Code's ``~/.claude.json``).

    ``id`` is the short badge shown in discovery (``"cc"``), ``global_json`` the
    provider's global file whose ``mcpServers`` the rebuild may fill gaps from,
    ``agent_mcp_file`` an optional per-agent file of that provider, and
    ``label`` the human name.
    """

    id: str
    global_json: Path
    agent_mcp_file: Path | None
    label: str


@dataclass(frozen=True)
class ManagedMcpServer:
    """An MCP server a plugin owns end to end; the rebuild rewrites it every time.

    ``args`` are the arguments to ``command`` (``None`` means the live
    ``kirocrew`` executable). ``may_auto_approve`` False means no ``autoApprove``
    key may ever be written for it (computer use: an auto-approved tool would
    bypass the permission gate entirely). ``timeout_ms`` is the entry's ``timeout``
    (kiro-cli's limit per MCP request) when the user set none: a server whose tool
    may block on purpose (``ask_question`` waits for a person) needs more than
    kiro-cli's default.
    """

    name: str
    args: tuple[str, ...]
    may_auto_approve: bool
    description: str = ""
    command: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_ms: int | None = None


def _never_busy() -> str | None:
    return None


@dataclass(frozen=True)
class HostService:
    """A long-lived service a plugin runs inside the host (``host_services()``).

    ``start`` runs once when the host starts, before its socket accepts connections;
    ``stop`` once when it stops (also after a failed start, so it must cope with never
    having started). ``busy`` says why the host must not idle out or retire right now
    (``"2 runs in progress"``), or ``None``. It is called often: keep it cheap and
    non-blocking.
    """

    name: str
    start: Callable[[], Awaitable[None]]
    stop: Callable[[], Awaitable[None]]
    busy: Callable[[], str | None] = _never_busy


@dataclass(frozen=True)
class HostedMcpServer:
    """An MCP server the host serves on its socket (``host_mcp_servers()``).

    ``name`` is the server's MCP name (``kirocrew-conversations``); ``command`` the
    ``kirocrew`` subcommand whose bare form (no arguments) is the relay to it
    (``mcp-conversations``). ``server`` returns the mcp SDK low-level ``Server`` to run
    one connection's session on; it is called for each connection (returning one
    shared instance is fine) and may be a coroutine function. It may raise a
    :class:`~kirocrew_core.errors.KirocrewError` (the service is not available): the
    connection is refused with its code and message.
    """

    name: str
    command: str
    server: Callable[[], Any]
    description: str = ""


@dataclass(frozen=True)
class CoreMcpTool:
    """A tool a plugin adds to the ``kirocrew-core`` MCP server (``core_mcp_tools()``).

    ``handler(args, call)`` receives the arguments, already validated against
    ``input_schema`` (unknown fields refused), and a
    :class:`~kirocrew_core.coretools.contract.ToolCall` carrying the caller's session
    resolved per ``identity`` (``strict``: the server refuses an unverified caller
    before the handler runs; ``lenient``; ``none``). It returns the result text and
    may be a coroutine function; it signals a refusal by raising
    :class:`~kirocrew_core.coretools.contract.ToolRefused` (or any
    :class:`~kirocrew_core.errors.KirocrewError`) with a stable code. It must hold no
    per-caller state: everything about a session lives in the host, keyed by session.
    ``read_only`` marks a tool that changes nothing (MCP's ``readOnlyHint``).
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Callable[..., Any]
    read_only: bool = False
    identity: Literal["strict", "lenient", "none"] = "lenient"


@dataclass(frozen=True)
class WorkerLoad:
    """The kiro-cli workers a plugin runs in the host right now (``worker_load()``), for ``resource_status``.

    ``pids`` are the live workers' process ids (the host measures them); ``max_workers`` how many
    may run at once; ``runs_in_progress`` the runs executing or waiting for a worker;
    ``subagent_cap`` how many sub-agents one session may have active at once (``None``: this
    plugin spawns none).
    """

    source: str
    pids: tuple[int, ...]
    max_workers: int
    runs_in_progress: int
    subagent_cap: int | None = None


@dataclass(frozen=True)
class RegistryLoader:
    """An extra registry source (e.g. ``connections.providers``), validated by its owner."""

    name: str
    load: Callable[[], Any]
    description: str = ""


@dataclass(frozen=True)
class AuthorityBackend:
    """An execution authority (unrestricted, a Linux or macOS sandbox, …).

    ``available`` says whether it can run on this host and why not; an
    authority that cannot run must make callers fail closed, never fall back to
    running unrestricted. ``platforms`` are the ``sys.platform`` values it runs
    on (empty: every platform); a backend for another platform is never chosen.
    For conversations, ``factory(options: AcpOptions, *, workspace: str) ->
    AcpOptions`` returns the options that launch kiro-cli under the authority.
    """

    name: str
    description: str
    available: Callable[[], tuple[bool, str]]
    factory: Callable[..., Any]
    platforms: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProtectedPath:
    """A file or folder crew sessions never write; with ``secret``, they read it only with the owner's say-so.

    The permission gate turns these into its built-in rules (``deny`` writes, ``ask`` reads of
    secrets), which no owner or project rule can weaken. A folder covers everything below it.
    """

    path: Path
    secret: bool = False
    label: str = ""


@dataclass(frozen=True)
class SecretFile:
    """A file whose content is a secret value no result kirocrew stores or shows may carry.

    The redactor (:func:`kirocrew_core.redaction.redact_secrets`) reads it, again whenever the
    file changes, and removes the value from every text it redacts, in the encodings it could be
    printed in (hex, base64, ...). ``binary``: the value is the file's bytes as they are (a key);
    otherwise its text with surrounding whitespace taken off (a token). A folder stands for each
    regular file directly inside it, one value per file. ``label`` names it in logs, never the value.
    """

    path: Path
    binary: bool = False
    label: str = ""


@dataclass(frozen=True)
class DoctorResult:
    """One check's verdict. ``fail`` makes ``kirocrew doctor`` exit 1."""

    status: DoctorStatus
    summary: str
    detail: str = ""


@dataclass(frozen=True)
class DoctorCheck:
    """A named check run by ``kirocrew doctor`` and shown on the dashboard home page."""

    name: str
    run: Callable[[], DoctorResult]
    description: str = ""


@dataclass(frozen=True)
class DashboardPage:
    """A page a plugin adds to the dashboard; the navigation and the overview link to it.

    ``endpoint`` is a Starlette endpoint (``async def endpoint(request)``); the
    gateway mounts it at ``path`` behind owner authentication. ``package`` names
    the importable Python package that ships the page's ``templates/`` and
    ``static/`` folders: its templates load as ``"<package>/<name>"`` through
    :func:`kirocrew_core.gateway.shell.render_page`, its files are served at
    ``/static/<package>/<name>``. Empty when the page brings no files of its own.
    """

    path: str
    title: str
    endpoint: Callable[..., Awaitable[Any]] | Callable[..., Any]
    description: str = ""
    package: str = ""


@dataclass(frozen=True)
class HistoryMessage:
    """One message of a past session: ``role`` is ``user`` or ``assistant``; ``at`` an ISO time or ``""``."""

    role: Literal["user", "assistant"]
    text: str
    at: str = ""


@dataclass(frozen=True)
class HistorySession:
    """A past session a :class:`HistorySource` knows, without its messages.

    ``id`` is the source's own id (never shown to a model: the history index keys it
    opaquely); ``workspace`` the absolute directory it worked in (``""``: none);
    ``created``/``updated`` ISO times. ``version`` changes whenever its messages do, so
    the index calls ``messages()`` only for a session it has not seen at that version.
    ``resume`` is what the owner would type to continue it in a terminal (``""``: nothing).
    """

    id: str
    title: str
    workspace: str
    created: str
    updated: str
    version: str
    messages: Callable[[], Sequence[HistoryMessage]]
    resume: str = ""


@dataclass(frozen=True)
class HistorySource:
    """A store of past sessions the history index reads (``history_sources()``).

    ``name`` is short and stable (it is part of every session's key, so renaming it
    re-keys its sessions); ``sessions()`` lists what the store holds now, cheaply, and
    may raise: the index then keeps what it had from this source and says so.
    """

    name: str
    label: str
    sessions: Callable[[], Sequence[HistorySession]]


@dataclass(frozen=True)
class SummaryRequest:
    """One past session to summarize: the index's ``key`` (to match the answer), its title and its
    ``transcript``: the newest messages, oldest first, already redacted and bounded by core."""

    key: str
    title: str
    transcript: str


@dataclass(frozen=True)
class HistorySummarizer:
    """Writes a short summary of past sessions with a model (``history_summarizers()``).

    ``summarize(requests)`` yields ``(key, summary)`` as each summary is ready, leaving out a
    session it could not summarize; it raises :class:`~kirocrew_core.errors.KirocrewError` when
    it cannot run at all. Core stops reading it when its time budget is spent (the generator is
    closed then, so it must clean up in ``finally``). A summary prompt must never be able to act:
    the model gets no tools.
    """

    name: str
    summarize: Callable[[Sequence[SummaryRequest]], AsyncGenerator[tuple[str, str], None]]


@dataclass(frozen=True)
class Publication:
    """One artifact version a deploy destination publishes (what the owner confirmed).

    ``site_id`` is the deploy's name (lowercase letters, digits, ``-``), ``content`` the version's
    bytes, ``ttl_hours`` how long the requester asked it to stay up (0: for good).
    """

    site_id: str
    slug: str
    version: int
    kind: str
    content: bytes
    ttl_hours: int


@dataclass(frozen=True)
class DeployDestination:
    """Where ``deploy_artifact`` may publish (``deploy_destinations()``).

    ``name`` is what a deploy's ``profile`` names; ``publish`` runs when the owner confirms, in a
    worker thread, and returns one sentence saying where the artifact now is (or raises
    :class:`~kirocrew_core.errors.KirocrewError` with a code: nothing was published); ``ready``
    says why it cannot publish now (unconfigured), or None, and is asked before a deploy is
    queued so a request that could never publish is refused at once.
    """

    name: str
    description: str
    publish: Callable[[Publication], str]
    ready: Callable[[], str | None] = lambda: None


@dataclass(frozen=True)
class OutgoingMessage:
    """What a message channel delivers (``message_channels()``): one ``send_message`` or ``file_send``.

    ``id`` is kirocrew's message id; ``sender`` the attribution line naming the session (and cron job)
    that sent it, which a channel must show with the text; ``file`` the outbox copy a ``file_send``
    delivers (None for a plain message). The texts are already redacted of secrets.
    """

    id: str
    title: str
    text: str
    sender: str
    file: Path | None = None


@dataclass(frozen=True)
class MessageChannel:
    """A place ``send_message`` delivers to besides the owner's feed (``message_channels()``).

    ``send(message)`` runs in a worker thread, bounded by ``timeout_secs`` (a channel must also bound
    its own network calls by it, so a hanging peer cannot hold the thread); it returns the delivery's
    id on the channel (what ``delete`` is later given), or raises (any exception: the message falls back
    to the feed, and the result says so). ``delete(delivery_id)`` withdraws a delivery where the
    channel can (None: it cannot). ``kind`` names the implementation (``email``, ``webhook``);
    ``description`` says where it delivers without any secret.
    """

    name: str
    kind: str
    description: str
    send: Callable[[OutgoingMessage], str]
    delete: Callable[[str], None] | None = None
    timeout_secs: float = 10.0


@dataclass(frozen=True)
class CronJobRef:
    """The cron job whose agent run a conversation is (``conversation_cron_job()``).

    ``created_by`` is the conversation that made the job, when a session made it (None: the person did).
    """

    job_id: str
    name: str
    created_by: str | None = None


@dataclass(frozen=True)
class Contribution:
    """One hook result credited to the plugin that returned it."""

    plugin: str
    value: Any


def flatten(results: Sequence[Contribution]) -> list[Contribution]:
    """Expand list-valued contributions into one :class:`Contribution` per item, order kept."""
    out: list[Contribution] = []
    for contribution in results:
        value = contribution.value
        if isinstance(value, (list, tuple)):
            out.extend(Contribution(contribution.plugin, item) for item in value)
        elif value is not None:
            out.append(contribution)
    return out
