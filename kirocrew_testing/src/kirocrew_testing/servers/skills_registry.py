"""A skills registry fixture on 127.0.0.1, with the API kirocrew's ``skill_discover``/``skill_fetch`` speak.

* ``GET /api/search?q=Q&limit=N`` → ``{"skills": [{"id", "name", "description", "installs"}]}``: the
  skills whose id, name or description holds ``Q`` (case-insensitive);
* ``GET /api/skills/OWNER/REPO/SKILL`` → ``{"id", "name", "files": [{"path", "content"}]}``, or 404;
* ``GET /api/huge/...`` and the id ``acme/big/huge``: a body over 1 MiB, streamed in pieces.

Every request's path and query are recorded (``requests``), so a test can see what left kirocrew.
In process: ``with skills_registry(SKILLS) as registry: registry.url``; or
``python -m kirocrew_testing.servers.skills_registry`` prints ``READY http://127.0.0.1:PORT``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kirocrew_testing.servers._common import LOOPBACK, READY_PREFIX

HUGE_ID = "acme/big/huge"
HUGE_BYTES = 1024 * 1024 + 4096

#: The skills the fixture serves by default: id → files.
SKILLS: dict[str, dict[str, str]] = {
    "acme/tools/pdf-forms": {
        "SKILL.md": "---\nname: pdf-forms\ndescription: Fill and flatten PDF forms\n---\n# PDF forms\nUse pdftk.\n",
        "scripts/fill.sh": "#!/bin/sh\npdftk \"$1\" fill_form \"$2\" output \"$3\"\n",
    },
    "acme/tools/changelog": {
        "SKILL.md": "---\nname: changelog\ndescription: Write a changelog entry from commits\n---\nGroup by type.\n",
    },
    "acme/tools/broken": {"SKILL.md": "no front matter here\n"},
    "acme/tools/escape": {"SKILL.md": "---\nname: x\ndescription: y\n---\n", "../../outside.txt": "gotcha"},
}


def _description(skill_md: str) -> str:
    found = re.search(r"^description: (.*)$", skill_md, re.MULTILINE)
    return found.group(1) if found else ""


@dataclass
class Registry:
    url: str
    requests: list[str] = field(default_factory=list)


def _handler(skills: Mapping[str, Mapping[str, str]], seen: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _json(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            seen.append(self.path)
            parts = urlsplit(self.path)
            if parts.path == "/api/search":
                query = parse_qs(parts.query).get("q", [""])[0].casefold()
                limit = int(parse_qs(parts.query).get("limit", ["10"])[0])
                found = [{"id": sid, "name": sid.rsplit("/", 1)[1], "description": _description(files["SKILL.md"]),
                          "installs": 7} for sid, files in skills.items()
                         if query in sid.casefold() or query in files["SKILL.md"].casefold()]
                self._json(200, {"skills": found[:limit]})
                return
            if parts.path == f"/api/skills/{HUGE_ID}":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                piece = b" " * 65536
                for _ in range(HUGE_BYTES // len(piece) + 1):
                    self.wfile.write(piece)
                return
            prefix = "/api/skills/"
            if parts.path.startswith(prefix) and parts.path[len(prefix):] in skills:
                sid = parts.path[len(prefix):]
                self._json(200, {"id": sid, "name": sid.rsplit("/", 1)[1],
                                 "files": [{"path": p, "content": c} for p, c in skills[sid].items()]})
                return
            self._json(404, {"error": "not found"})

    return Handler


@contextmanager
def skills_registry(skills: Mapping[str, Mapping[str, str]] = SKILLS) -> Iterator[Registry]:
    """Serve ``skills`` on 127.0.0.1 (any free port) for the ``with`` block."""
    seen: list[str] = []
    server = ThreadingHTTPServer((LOOPBACK, 0), _handler(skills, seen))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Registry(f"http://{LOOPBACK}:{server.server_address[1]}", seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def main() -> None:
    import time

    with skills_registry() as registry:
        print(f"{READY_PREFIX}{registry.url}", flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
