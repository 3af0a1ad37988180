"""``kirocrew serve``: the host (:mod:`kirocrew_core.host.server`) and its gateway under uvicorn.

One host per crew home: the run lock is taken first, so a second ``serve`` says a host
already runs instead of fighting over the port or the socket. The TCP socket is bound
here, not by uvicorn, so ``--port 0`` works and the printed sign-in URL carries the real
port. Exactly one line goes to stdout, once the host's services, its socket and the
startup hooks are up::

    kirocrew gateway: http://127.0.0.1:7317/?token=...

``--background`` is how a relay starts a host on demand: nothing on stdout (the relay
sends stderr to ``<crew home>/host/host.log``), a free port when the configured one is
taken, and an exit after ``host.idle_secs`` without use. Ctrl-C, SIGTERM or
``kirocrew host stop`` stops it: open requests get a few seconds, the shutdown hooks and
the services' stops run, and the command exits 0 (a stop is the normal end of ``serve``).

``--override-origin ORIGIN=URL`` (development only, see :mod:`kirocrew_core.origin_overrides`)
routes a connection provider's origin to a loopback fixture; it is refused off loopback and
in a background host, announced on stderr, and shown on every dashboard page.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from kirocrew_core.errors import BadInputError, KirocrewError

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from kirocrew_core.host.server import Host

# Seconds open requests (an event stream, say) get once a stop is asked for.
GRACEFUL_SHUTDOWN_SECS = 5

_REMOTE_WARNING = """\
kirocrew: WARNING: the gateway is listening on {where}, reachable from other machines.
kirocrew: WARNING: whoever holds the owner token controls your agents, your MCP servers and
kirocrew: WARNING: your connected accounts. The gateway speaks plain HTTP, so the token and
kirocrew: WARNING: everything else cross the network unencrypted. Prefer a loopback gateway
kirocrew: WARNING: reached through an SSH tunnel (ssh -L {port}:127.0.0.1:{port} <this host>).
"""


@dataclass(frozen=True)
class BindAddress:
    """Where ``serve`` will listen: one resolved socket address."""

    family: int
    sockaddr: tuple[Any, ...]

    @property
    def ip(self) -> str:
        return str(self.sockaddr[0]).split("%", 1)[0]

    @property
    def is_loopback(self) -> bool:
        return ipaddress.ip_address(self.ip).is_loopback

    @property
    def browsable_ip(self) -> str:
        """The address a local browser should use (a wildcard bind is reached over loopback)."""
        if ipaddress.ip_address(self.ip).is_unspecified:
            return "::1" if self.family == socket.AF_INET6 else "127.0.0.1"
        return self.ip


def resolve_bind_address(host: str, port: int) -> BindAddress:
    """Resolve ``--host`` to the one address that will be bound (the first getaddrinfo answer)."""
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name.lower() == "localhost":
        # "localhost" may resolve to ::1 first; 127.0.0.1 is what every browser reaches.
        name = "127.0.0.1"
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise BadInputError(f"cannot resolve host {host!r}: {exc}", code="bad_bind_host") from exc
    family, _type, _proto, _canonname, sockaddr = infos[0]
    return BindAddress(family, tuple(sockaddr))


def bind_socket(address: BindAddress) -> socket.socket:
    """A listening socket on ``address``; ``bind_failed`` (exit 1) if the port is taken."""
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets it knows are TCP, and
    # without it every keep-alive request after the first stalls ~40 ms (Nagle + delayed ACK).
    sock = socket.socket(address.family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if os.name != "nt":
            # Lets a restart reuse a port still in TIME_WAIT; a live listener still blocks the bind.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address.sockaddr)
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        raise KirocrewError(
            f"cannot listen on {address.ip} port {address.sockaddr[1]}: {exc.strerror or exc}",
            code="bind_failed",
        ) from exc
    return sock


def sign_in_url(address: BindAddress, port: int, token: str) -> str:
    """The URL that signs the owner in (``serve`` prints it; nothing else should)."""
    ip = address.browsable_ip
    shown = f"[{ip}]" if ":" in ip else ip
    return f"http://{shown}:{port}/?token={token}"


def run_gateway(app: Starlette, sock: socket.socket, on_ready: Callable[[], None],
                host: Host | None = None) -> None:
    """Serve ``app`` on ``sock`` until Ctrl-C, SIGTERM or the host's own decision to stop.

    ``on_ready`` runs once startup is done.

    uvicorn re-raises the stop signal after a graceful shutdown, which would end
    the process by SIGTERM or a KeyboardInterrupt traceback; while it runs, the
    handlers it restores and re-raises into are no-ops, so a stop exits 0.
    """
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and not self.should_exit:
                on_ready()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # Before uvicorn waits for open requests: a probe holding one open ends now.
            from kirocrew_core.gateway.app import run_stopping_hooks

            await run_stopping_hooks(app)
            await super().shutdown(sockets=sockets)

    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,  # it would log "GET /?token=..." in the clear
        lifespan="on",
        proxy_headers=False,  # nothing sits in front of a loopback gateway; keep scope honest
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECS,
    )
    server = _Server(config)
    if host is not None:
        host.request_exit = lambda reason: setattr(server, "should_exit", True)
    previous = {sig: signal.signal(sig, _stop_already_handled) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=[sock])
    except SystemExit as exc:
        if exc.code == STARTUP_FAILURE:
            raise KirocrewError(
                "the gateway did not start: a gateway_startup hook failed (see the log above)",
                code="gateway_startup_failed",
            ) from None
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_already_handled(signum: int, frame: object) -> None:
    """The replayed stop signal: uvicorn has already shut down gracefully."""


def _configured(name: str) -> Any:
    from kirocrew_core.config import load_config

    return load_config().get(name)


@click.command("serve")
@click.option("--host", default=None, help="Address to bind (default: config gateway.host, 127.0.0.1).")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port to bind (default: config gateway.port, 7317); 0 picks a free port.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a non-loopback --host. Anyone on the network who gets the token controls your agents.",
)
@click.option(
    "--background",
    is_flag=True,
    help="Run as a host started on demand (what relays do): print nothing, take a free port if the configured "
         "one is taken, and exit after host.idle_secs without clients, runs or dashboard use.",
)
@click.option(
    "--override-origin",
    "override_origin",
    multiple=True,
    metavar="ORIGIN=URL",
    help="Development only: send a connection provider's requests for ORIGIN to URL (http(s) on a loopback "
         "host; the gateway must listen on loopback). Repeatable; announced on stderr and on every page.",
)
@click.option(
    "--no-crons",
    "no_crons",
    is_flag=True,
    help="Run without the cron scheduler: cron jobs can still be listed and changed, but none fires and "
         "`kirocrew cron trigger` is refused (sets KIROCREW_CRONS=off for the host).",
)
def serve(host: str | None, port: int | None, allow_remote: bool, background: bool,
          override_origin: tuple[str, ...] = (), no_crons: bool = False) -> None:
    """Run the host: the gateway and dashboard, and the socket every kirocrew MCP server relays to.

    The gateway listens on 127.0.0.1 and serves only its owner: the URL it
    prints ends in ?token=...; opening it signs this browser in. Scripts can
    send "Authorization: Bearer <token>" (the token is in the crew home's
    gateway.token file). One host runs per crew home; MCP clients that start
    `kirocrew mcp-...` start one in the background when none runs.
    """
    import logging

    from kirocrew_core import origin_overrides, ownership
    from kirocrew_core.gateway.app import create_app
    from kirocrew_core.gateway.auth import LOOPBACK_HOSTS, load_or_create_token
    from kirocrew_core.host import paths
    from kirocrew_core.host.fingerprint import code_fingerprint
    from kirocrew_core.host.server import Host, idle_secs
    from kirocrew_core.plugins import get_plugin_manager
    from kirocrew_core.sdk_models import prepare as prepare_sdk_models

    prepare_sdk_models()  # before any service imports the SDKs
    if no_crons:  # read by the cron plugin's host service (kirocrew_cron.service.CRONS_ENV) when it starts
        os.environ["KIROCREW_CRONS"] = "off"
    host = host if host is not None else str(_configured("gateway.host"))
    port = port if port is not None else int(_configured("gateway.port"))
    address = resolve_bind_address(host, port)
    if not address.is_loopback and not allow_remote:
        raise KirocrewError(
            f"refusing to listen on {host!r} ({address.ip}), which is not a loopback address: "
            "the gateway controls your agents. Pass --allow-remote if you really mean it.",
            code="non_loopback_bind",
            exit_code=2,
        )
    overrides = origin_overrides.parse_overrides(override_origin)
    origin_overrides.require_development(overrides, gateway_loopback=address.is_loopback, background=background)
    idle = idle_secs()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s kirocrew host: %(levelname)s: %(name)s: %(message)s"
                        if background else "kirocrew host: %(levelname)s: %(message)s")
    try:
        paths.ensure_socket_dir()
        run_lock = ownership.acquire(paths.run_lock_file())
    except ownership.OwnershipHeldError as held:
        if background:  # a relay raced another starter: the running host is the answer
            return
        raise KirocrewError(
            f"a kirocrew host already runs for this crew home (pid {held.owner}); "
            "`kirocrew dashboard` prints its sign-in URL and `kirocrew host stop` stops it",
            code="host_running",
        ) from None
    except OSError as exc:
        raise KirocrewError(f"cannot prepare the host directory: {exc}", code="host_dir_unusable") from exc

    try:
        token = load_or_create_token()
        sock = _bind(address, background)
        try:
            bound_port = sock.getsockname()[1]
            if not address.is_loopback:
                sys.stderr.write(_REMOTE_WARNING.format(where=f"{address.ip} port {bound_port}", port=bound_port))
                sys.stderr.flush()
            origin_overrides.activate(overrides)
            for line in origin_overrides.announcement(overrides):
                sys.stderr.write(line + "\n")
            sys.stderr.flush()
            url = sign_in_url(address, bound_port, token)
            the_host = Host(get_plugin_manager(), background=background, url=url.split("?", 1)[0],
                            idle_secs=idle, fingerprint=code_fingerprint())
            allowed_hosts = LOOPBACK_HOSTS | {address.ip} if address.is_loopback else None
            app = create_app(get_plugin_manager(), token=token, allowed_hosts=allowed_hosts, host=the_host)
            on_ready = (lambda: None) if background else (lambda: print(f"kirocrew gateway: {url}", flush=True))
            run_gateway(app, sock, on_ready, host=the_host)
        finally:
            sock.close()
    finally:
        run_lock.release()


def _bind(address: BindAddress, background: bool) -> socket.socket:
    """The listening socket; a background host takes a free port when the configured one is taken."""
    try:
        return bind_socket(address)
    except KirocrewError:
        if not background or address.sockaddr[1] == 0:
            raise
        return bind_socket(BindAddress(address.family, (address.sockaddr[0], 0, *address.sockaddr[2:])))
