"""The operator's OAuth client for a pre-registered provider: the one answer to "which client id and secret".

GitHub and Asana accept only an OAuth app registered with them in advance, so
the owner registers one and tells kirocrew its client id (and, for a
confidential client, its secret). Where each comes from, first match wins:

* client id: ``KIROCREW_CONNECTIONS_<SLUG>_CLIENT_ID``, else the config key
  ``connections.<slug>.client_id`` (declared for the shipped pre-registered
  providers), else the registry entry's own ``client_id``;
* secret: ``KIROCREW_CONNECTIONS_<SLUG>_CLIENT_SECRET``, else the owner-only
  file ``<crew home>/state/connections/clients/<slug>.secret`` that
  ``kirocrew connections client set`` writes from stdin.

The secret is never logged, printed, put in ``config.toml``, in the crew MCP
store or in the rendered agent file (which the model's file tools can read).
Only the cold mint's private spec carries it, because kiro-cli needs it for
the first token exchange; after that kiro-cli refreshes with the registration
it stored next to the grant. A secret file that is a symlink, not a regular
file, or readable by anyone but the owner is refused (``client_secret_symlink``,
``client_secret_not_file``, ``client_secret_file_mode``) rather than used.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, KirocrewError

if TYPE_CHECKING:
    from kirocrew_connections.registry import Provider, Registry

log = logging.getLogger(__name__)

#: The shipped pre-registered providers, whose client id also has a config key.
CONFIGURABLE_SLUGS = ("github", "asana")
SECRET_SUFFIX = ".secret"
PRIVATE_DIR_MODE = 0o700
SECRET_FILE_MODE = 0o600
MAX_SECRET_BYTES = 4096
MAX_CLIENT_ID_CHARS = 512
_ENV_UNSAFE = re.compile(r"[^A-Z0-9]")
_PRINTABLE = re.compile(r"\A[\x21-\x7e]+\Z")


class ClientConfigError(KirocrewError):
    """The operator client is configured in a way kirocrew refuses to use; nothing was changed."""

    code = "client_config_invalid"
    exit_code = 2


@dataclass(frozen=True)
class OperatorClient:
    """A pre-registered provider's client as configured; ``secret`` never appears in a repr."""

    client_id: str
    id_source: str  # "environment" | "config" | "registry"
    secret: str | None = field(default=None, repr=False)
    secret_source: str | None = None  # "environment" | "file" | None

    def ready_for(self, provider: Provider) -> bool:
        """Complete enough to mint: an id, and the secret when the provider's client is confidential."""
        return bool(self.client_id) and (not confidential(provider) or bool(self.secret))


def confidential(provider: Provider) -> bool:
    return bool(provider.auth is not None and provider.auth.confidential)


def client_env_names(slug: str) -> tuple[str, str]:
    """``(KIROCREW_CONNECTIONS_<SLUG>_CLIENT_ID, ..._CLIENT_SECRET)`` for a pre-registered provider."""
    stem = "KIROCREW_CONNECTIONS_" + _ENV_UNSAFE.sub("_", slug.upper())
    return f"{stem}_CLIENT_ID", f"{stem}_CLIENT_SECRET"


def config_key(slug: str) -> str:
    """``connections.<slug>.client_id``: the config key of a shipped pre-registered provider's client id."""
    return f"connections.{slug}.client_id"


def _check_client_id(value: Any) -> str | None:
    if value == "":
        return None  # unset
    if not isinstance(value, str) or len(value) > MAX_CLIENT_ID_CHARS or not _PRINTABLE.match(value):
        return "must be a client id: printable characters without spaces"
    return None


def register_config_keys() -> None:
    """Declare ``connections.<slug>.client_id`` for the shipped pre-registered providers (cheap, at import)."""
    from kirocrew_core.config import ConfigKey, register_key

    for slug in CONFIGURABLE_SLUGS:
        register_key(ConfigKey(
            config_key(slug), str, "",
            f"Client id of the OAuth app you registered with {slug} for Connections "
            f"(KIROCREW_CONNECTIONS_{slug.upper()}_CLIENT_ID overrides); the secret is set with "
            f"`kirocrew connections client set {slug}`, never here.",
            _check_client_id,
        ))


def clients_dir() -> Path:
    """``<crew home>/state/connections/clients``: owner-only, one secret file per provider."""
    return home.state_dir("connections") / "clients"


def secret_file(slug: str) -> Path:
    return clients_dir() / f"{slug}{SECRET_SUFFIX}"


# -- reading ------------------------------------------------------------------------------


def read_secret_file(slug: str) -> str | None:
    """The stored secret, None when there is none; refuse a file anyone else could read or swap.

    Opened with ``O_NOFOLLOW`` and checked on the open descriptor, so the file
    judged is the file read.
    """
    path = secret_file(slug)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ClientConfigError(f"{path} is a symlink; remove it and set the client again",
                                    code="client_secret_symlink") from None
        raise ClientConfigError(f"{path} cannot be read ({exc.strerror})", code="client_secret_unreadable") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ClientConfigError(f"{path} is not a regular file", code="client_secret_not_file")
        if st.st_mode & 0o077 or st.st_uid != os.getuid():
            raise ClientConfigError(
                f"{path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                f"run chmod 600 on it or set the client again", code="client_secret_file_mode")
        raw = os.read(fd, MAX_SECRET_BYTES + 1)
    finally:
        os.close(fd)
    text = raw.decode("utf-8", "replace").strip()
    return text or None


def _config_client_id(slug: str, config: Any) -> str | None:
    if slug not in CONFIGURABLE_SLUGS:
        return None
    if config is None:
        from kirocrew_core.config import load_config

        try:
            config = load_config()
        except KirocrewError as exc:
            log.warning("connections: config.toml could not be read for the %s client id: %s", slug, exc.code)
            return None
    try:
        value = config.get(config_key(slug))
    except KirocrewError:  # the key is not declared in this process
        return None
    return value.strip() if isinstance(value, str) and value.strip() else None


def operator_client(provider: Provider, *, env: Mapping[str, str] | None = None,
                    config: Any = None, strict: bool = False) -> OperatorClient | None:
    """The configured client of a pre-registered ``provider``; None for DCR or without a client id.

    A secret file kirocrew refuses counts as no secret (warned once per read,
    without its contents) unless ``strict``, when the :class:`ClientConfigError`
    is raised for the caller to report.
    """
    if not provider.preregistered:
        return None
    environ = os.environ if env is None else env
    id_name, secret_name = client_env_names(provider.slug)
    client_id, id_source = environ.get(id_name, "").strip(), "environment"
    if not client_id:
        client_id, id_source = _config_client_id(provider.slug, config) or "", "config"
    if not client_id and provider.client_id:
        client_id, id_source = provider.client_id, "registry"
    if not client_id:
        return None
    secret: str | None = environ.get(secret_name, "").strip() or None
    secret_source = "environment" if secret else None
    if secret is None:
        try:
            secret = read_secret_file(provider.slug)
        except ClientConfigError as exc:
            if strict:
                raise
            log.warning("connections: the %s client secret is not used: %s (%s)", provider.slug, exc.message,
                        exc.code)
            secret = None
        secret_source = "file" if secret else None
    return OperatorClient(client_id, id_source, secret, secret_source)


def with_operator_clients(registry: Registry, *, env: Mapping[str, str] | None = None) -> Registry:
    """``registry`` with each pre-registered provider carrying the operator's client id and readiness.

    The secret itself stays out of the registry: a provider only learns
    whether one is configured (``client_secret_set``), which is what its
    visibility needs; the mint reads the secret when it writes its private spec.
    """
    from dataclasses import replace

    from kirocrew_connections.registry import Registry as RegistryType

    if not any(p.preregistered for p in registry.all()):
        return registry
    config = _load_config_quietly()
    providers = []
    for provider in registry.all():
        if provider.preregistered:
            client = operator_client(provider, env=env, config=config)
            provider = replace(provider, client_id=client.client_id if client else None,
                               client_secret_set=bool(client and client.secret))
        providers.append(provider)
    return RegistryType.of(providers)


def _load_config_quietly() -> Any:
    from kirocrew_core.config import load_config

    try:
        return load_config()
    except KirocrewError as exc:
        log.warning("connections: config.toml could not be read for client ids: %s", exc.code)
        return _NoConfig()


class _NoConfig:
    def get(self, name: str) -> Any:
        return ""


def mint_oauth_fields(provider: Provider, client: OperatorClient | None, *,
                      with_secret: bool) -> dict[str, Any]:
    """The entry keys kiro-cli needs for a pre-registered client (empty for DCR or an unconfigured one).

    ``oauth.clientId``, ``oauth.redirectUri`` (the full callback URL registered
    with the provider, e.g. ``http://127.0.0.1:48101/callback``: kiro-cli 2.12,
    the release that added pre-registered apps, listens on its host and port and
    sends it verbatim, so it matches the registration exactly) and
    ``oauthScopes``; ``oauth.clientSecret`` only ``with_secret`` (the private
    mint spec), never in the crew store or the rendered agent file.
    """
    if not provider.preregistered or client is None or provider.auth is None:
        return {}
    oauth: dict[str, Any] = {
        "clientId": client.client_id,
        "redirectUri": provider.redirect_uri,
    }
    if with_secret and confidential(provider) and client.secret:
        oauth["clientSecret"] = client.secret
    fields: dict[str, Any] = {"oauth": oauth}
    if provider.recommended_scopes:
        fields["oauthScopes"] = list(provider.recommended_scopes)
    return fields


# -- the owner's commands -------------------------------------------------------------------


def preregistered_provider(registry: Registry, raw: object) -> Provider:
    """The pre-registered provider named ``raw``; ``unknown_provider`` / ``not_preregistered`` otherwise."""
    provider = registry.get(raw)
    if not provider.preregistered:
        raise BadInputError(f"{provider.slug} registers its own OAuth client (dynamic registration); "
                            "it takes no client configuration", code="not_preregistered")
    return provider


def _ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) owner-only; refuse one that is a symlink or someone else's."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ClientConfigError(f"{path} is not a private directory of this user", code="client_dir_unsafe")
    if stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
        os.chmod(path, PRIVATE_DIR_MODE)


def check_secret(secret: str) -> str:
    text = secret.strip()
    if not text:
        raise BadInputError("the client secret is empty (pipe it on stdin)", code="client_secret_empty")
    if len(text.encode("utf-8")) > MAX_SECRET_BYTES or not _PRINTABLE.match(text):
        raise BadInputError("the client secret must be printable characters without spaces",
                            code="client_secret_invalid")
    return text


def check_client_id(client_id: str) -> str:
    text = client_id.strip()
    if not text:
        raise BadInputError("the client id is empty", code="client_id_empty")
    if _check_client_id(text):
        raise BadInputError("the client id must be printable characters without spaces",
                            code="client_id_invalid")
    return text


def refuse_unsafe_secret_target(slug: str) -> None:
    """Refuse before anything is written when the secret's dir or file is a symlink or the dir not ours."""
    for path in (home.state_dir("connections"), clients_dir(), secret_file(slug)):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise ClientConfigError(f"{path} is a symlink; remove it first", code="client_secret_symlink")
        if path != secret_file(slug) and (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()):
            raise ClientConfigError(f"{path} is not a private directory of this user", code="client_dir_unsafe")


def write_secret_file(slug: str, secret: str) -> Path:
    """Write the secret owner-only and atomically; never through a symlink planted at its name."""
    import secrets as _secrets

    refuse_unsafe_secret_target(slug)
    directory = clients_dir()
    _ensure_private_dir(directory)
    path = secret_file(slug)
    temp = directory / f".{slug}.{_secrets.token_hex(6)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, SECRET_FILE_MODE)
    try:
        os.write(fd, secret.encode("utf-8"))
        os.fsync(fd)
        os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return path


def remove_secret_file(slug: str) -> bool:
    path = secret_file(slug)
    try:
        os.unlink(path)  # unlinks a symlink itself, never its target
    except FileNotFoundError:
        return False
    return True


def describe(provider: Provider, *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What ``client show`` prints: where the id and secret come from; never the secret itself."""
    problem: ClientConfigError | None = None
    try:
        read_secret_file(provider.slug)
    except ClientConfigError as exc:
        problem = exc
    client = operator_client(provider, env=env)
    id_name, secret_name = client_env_names(provider.slug)
    return {
        "slug": provider.slug,
        "clientId": client.client_id if client else None,
        "clientIdSource": client.id_source if client else None,
        "confidential": confidential(provider),
        "secretSet": bool(client and client.secret),
        "secretSource": client.secret_source if client else None,
        "secretProblem": problem.code if problem else None,
        "ready": bool(client and client.ready_for(provider)),
        "redirectUri": provider.redirect_uri,
        "configKey": config_key(provider.slug) if provider.slug in CONFIGURABLE_SLUGS else None,
        "environment": [id_name, secret_name],
        "secretFile": str(secret_file(provider.slug)),
    }
