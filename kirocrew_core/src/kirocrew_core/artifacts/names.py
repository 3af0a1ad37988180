"""What an artifact's names, tags, kinds, sources and folder paths may be, and the one check for each.

Every check raises :class:`~kirocrew_core.errors.BadInputError` with a stable code and says what is
allowed; nothing is renamed or trimmed behind the caller's back (an explicit slug that is taken is
refused by the store, never suffixed). The tools' JSON Schemas quote the same constants, so a bad
value is refused the same way through MCP, the CLI and the store.
"""

from __future__ import annotations

import re
import unicodedata

from kirocrew_core.errors import BadInputError

SLUG_MAX_CHARS = 80
SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,78}[a-z0-9])?$"
NAME_MAX_CHARS = 200
DESCRIPTION_MAX_CHARS = 2000
TAG_MAX_CHARS = 64
MAX_TAGS = 16
FOLDER_NAME_MAX_CHARS = 100
FOLDER_REF_MAX_CHARS = 4096
MAX_FOLDER_DEPTH = 20
COMMENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,127}$"
COMMENT_MAX_CHARS = 10_000
QUOTE_MAX_CHARS = 2000
REASON_MAX_CHARS = 500
QUERY_MAX_CHARS = 200
MAX_VERSION = 10_000
#: 25 MiB: the largest content an artifact holds, counted in UTF-8 bytes.
CONTENT_MAX_BYTES = 25 * 1024 * 1024

#: The kinds an artifact may be. ``widget`` and ``webapp`` (the original's chat widgets and hosted apps)
#: are refused with ``kind_unsupported``: nothing here runs them, and storing them as HTML would lose
#: the metadata they depend on without saying so.
KINDS = ("markdown", "html", "svg", "json", "text", "image")
UNSUPPORTED_KINDS = ("widget", "webapp")
#: Where an artifact came from. A session's is decided by its verified identity (chat, cron, subagent);
#: ``import`` is the one a session may claim (it brought the content in from elsewhere).
SOURCES = ("chat", "cron", "subagent", "manual", "cli", "import")
#: Image content: a base64 ``data:`` URL of one of these types (kept as text, like every other kind).
IMAGE_PATTERN = re.compile(r"^data:image/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/]*={0,2}$")

_SLUG = re.compile(SLUG_PATTERN)
_COMMENT_ID = re.compile(COMMENT_ID_PATTERN)
_ROOT_REFS = ("", "root", "/")


def check_slug(slug: object) -> str:
    if not isinstance(slug, str) or not _SLUG.match(slug):
        raise BadInputError(f"slug must be 1-{SLUG_MAX_CHARS} lowercase letters, digits and inner hyphens "
                            "(like weekly-report-3)", code="invalid_slug")
    return slug


def slug_from(name: str) -> str:
    """The slug a name suggests (``Weekly Report!`` → ``weekly-report``); ``artifact`` when nothing is left."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:SLUG_MAX_CHARS].strip("-")
    return slug or "artifact"


def _plain_text(value: object, what: str, limit: int, code: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise BadInputError(f"{what} must be a string", code=code)
    if len(value) > limit:
        raise BadInputError(f"{what} is longer than {limit} characters", code=code)
    if not allow_empty and not value.strip():
        raise BadInputError(f"{what} must not be empty", code=code)
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in value):
        raise BadInputError(f"{what} must be one line without control or invisible format characters", code=code)
    return value


def check_name(name: object) -> str:
    return _plain_text(name, "name", NAME_MAX_CHARS, "invalid_name").strip()


def check_description(description: object) -> str:
    if not isinstance(description, str) or len(description) > DESCRIPTION_MAX_CHARS:
        raise BadInputError(f"description must be text of at most {DESCRIPTION_MAX_CHARS} characters",
                            code="invalid_description")
    return description


def check_tags(tags: object) -> list[str]:
    if not isinstance(tags, list) or len(tags) > MAX_TAGS:
        raise BadInputError(f"tags must be a list of at most {MAX_TAGS} tags", code="invalid_tags")
    checked = [_plain_text(tag, "a tag", TAG_MAX_CHARS, "invalid_tags").strip() for tag in tags]
    return list(dict.fromkeys(checked))


def check_kind(kind: object) -> str:
    if kind in UNSUPPORTED_KINDS:
        raise BadInputError(f"kind {kind} is not supported here (no widget or web-app runtime ships); save it as "
                            "html", code="kind_unsupported")
    if kind not in KINDS:
        raise BadInputError(f"kind must be one of {', '.join(KINDS)}", code="invalid_kind")
    return str(kind)


def check_content(content: object, kind: str) -> str:
    """The content as given, or ``content_too_large`` / ``invalid_content`` (nothing is stored either way)."""
    if not isinstance(content, str):
        raise BadInputError("content must be text", code="invalid_content")
    if len(content) > CONTENT_MAX_BYTES or len(content.encode("utf-8", "surrogatepass")) > CONTENT_MAX_BYTES:
        raise BadInputError(f"content is larger than {CONTENT_MAX_BYTES} bytes (25 MiB); nothing was saved",
                            code="content_too_large")
    if "\x00" in content or any("\ud800" <= ch <= "\udfff" for ch in content):
        raise BadInputError("content must be text without NUL or lone surrogate characters", code="invalid_content")
    if kind == "image" and not IMAGE_PATTERN.match(content):
        raise BadInputError("image content must be a data:image/(png|jpeg|gif|webp);base64,... URL",
                            code="invalid_content")
    if kind == "json":
        import json

        try:
            json.loads(content)
        except RecursionError:
            raise BadInputError("json content is nested too deeply", code="invalid_content") from None
        except json.JSONDecodeError as exc:
            raise BadInputError(f"json content does not parse: {exc.msg} (line {exc.lineno})",
                                code="invalid_content") from None
    return content


def check_folder_name(name: object) -> str:
    checked = _plain_text(name, "folder name", FOLDER_NAME_MAX_CHARS, "invalid_folder_name").strip()
    if "/" in checked or checked in (".", "..") or checked.lower() == "root":
        raise BadInputError("folder name must not contain / nor be ., .. or root", code="invalid_folder_name")
    return checked


def is_root_ref(ref: str) -> bool:
    return ref.strip() in _ROOT_REFS


def folder_path_parts(ref: object) -> list[str]:
    """The names of a ``/``-separated folder path (``Reports/2026``), each checked; [] for the root."""
    if not isinstance(ref, str) or len(ref) > FOLDER_REF_MAX_CHARS:
        raise BadInputError(f"folder must be a folder id or a /-separated path of at most {FOLDER_REF_MAX_CHARS} "
                            "characters", code="invalid_folder")
    if is_root_ref(ref):
        return []
    parts = [part for part in ref.strip().strip("/").split("/")]
    if any(not part.strip() for part in parts):
        raise BadInputError("folder path has an empty part (//)", code="invalid_folder")
    if len(parts) > MAX_FOLDER_DEPTH:
        raise BadInputError(f"folder path is deeper than {MAX_FOLDER_DEPTH}", code="folder_too_deep")
    return [check_folder_name(part) for part in parts]


def check_comment_id(comment_id: object) -> str:
    if not isinstance(comment_id, str) or not _COMMENT_ID.match(comment_id):
        raise BadInputError("not a comment id", code="invalid_comment_id")
    return comment_id


def check_comment_text(text: object) -> str:
    if not isinstance(text, str) or not text.strip() or len(text) > COMMENT_MAX_CHARS:
        raise BadInputError(f"comment text must be 1-{COMMENT_MAX_CHARS} characters", code="invalid_comment")
    if "\x00" in text:
        raise BadInputError("comment text must not contain NUL", code="invalid_comment")
    return text
