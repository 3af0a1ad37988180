"""One prompt turn: run the scripted steps, ask permissions, report usage.

Everything that waits (a sleep, a hang, a permission answer, a shell command,
an MCP call) races ``session/cancel``; a cancelled turn answers
``stopReason: "cancelled"``, as ACP requires, and a cancelled shell command's
process group is torn down through :mod:`kirocrew_core.proc`.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kirocrew_testing.fake_kiro import acp_shapes, commands, permissions, script, sessions
from kirocrew_testing.fake_kiro.wire import RpcError

if TYPE_CHECKING:
    from kirocrew_testing.fake_kiro.agent import FakeKiroAgent, LiveSession

ToolKind = Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"]
ToolCallStatus = Literal["pending", "in_progress", "completed", "failed"]

METADATA = "kiro.dev/metadata"
SHELL_TIMEOUT_SECS = 60.0
OUTPUT_LIMIT = 64 * 1024
CREDITS_PER_TURN = 0.01
CHARS_PER_CONTEXT_PERCENT = 2000
REJECTED = "Tool use was rejected by the user"

# Given whether the session trusts the tool, what its settings make of this call (see permissions.py).
Check = Callable[[bool], permissions.Verdict]

_KINDS: dict[str, ToolKind] = {"shell": "execute", "write": "edit", "read": "read", "glob": "search", "grep": "search",
          "web_fetch": "fetch", "web_search": "fetch", "todo_list": "think"}


class TurnCancelled(Exception):
    """``session/cancel`` arrived (or a permission request was answered ``cancelled``)."""


def prompt_text(blocks: list[dict[str, Any]]) -> str:
    """The text of a prompt; an image or a resource shows up as a placeholder line."""
    parts = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block["text"]))
        elif kind == "image":
            parts.append(f"[image {block.get('mimeType', '')}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.get('uri', '')}]")
        elif kind == "resource":
            resource = block.get("resource")
            text = resource.get("text") if isinstance(resource, dict) else None
            parts.append(text if isinstance(text, str) and text else "[resource]")
    return "\n".join(parts)


def prompt_images(blocks: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The prompt's image blocks as kiro keeps them inline: ``{data, mimeType}`` (base64)."""
    return [{"data": block["data"], "mimeType": block.get("mimeType", "")}
            for block in blocks if block.get("type") == "image" and isinstance(block.get("data"), str)]


def _read_head(path: Path, limit: int) -> str:
    with path.open("rb") as file:
        return file.read(limit).decode("utf-8", "replace")


def _call_id() -> str:
    return f"tooluse_{uuid.uuid4().hex[:22]}"


class Turn:
    def __init__(self, agent: FakeKiroAgent, session: LiveSession) -> None:
        self.agent = agent
        self.session = session
        self.reply: list[str] = []
        self.last_result: str | None = None  # what the last !mcp call returned, for !result
        self.prompt = ""
        self.started = time.monotonic()

    # -- the turn ---------------------------------------------------------------

    async def run(self, blocks: list[dict[str, Any]]) -> dict[str, Any]:
        text = prompt_text(blocks)
        files = self.session.files
        sessions.append_transcript(files, "user", text, prompt_images(blocks))
        sessions.append_history(files, text)
        self.session.chars += len(text)
        self.prompt = text
        try:
            # kiro replays the whole session to its backend, which refuses it once it holds bad media.
            sessions.check_media(files)
        except sessions.SessionBroken as exc:
            raise RpcError(-32603, str(exc)) from None
        try:
            slash = script.slash_command(text)
            if self.session.hub is not None:
                hub = self.session.hub
                # A slash command reports a server waiting on a consent as loading; a model turn waits for it.
                wait = hub.wait_answerable if slash is not None else hub.wait_settled
                await self._until_cancelled(wait(self.agent.init_timeout()))
            if slash is not None:
                result = await self.agent.execute_command(self.session, *slash)
                await self._say(result.message, meta={"kiro.dev": {"commandResult": result.as_dict()}})
            else:
                try:
                    steps = script.parse(text)
                except script.ScriptError as exc:
                    raise RpcError(-32602, f"fake-kiro-cli script: {exc}") from None
                for step in steps:
                    await self._steer()
                    await self._step(step)
        except TurnCancelled:
            await self._finish()
            return acp_shapes.prompt_response("cancelled")
        await self._finish()
        return acp_shapes.prompt_response("end_turn")

    async def _finish(self, **extra: Any) -> None:
        if self.reply:
            reply = "".join(self.reply)
            sessions.append_transcript(self.session.files, "assistant", reply)
            self.session.chars += len(reply)
        sessions.record_turn(self.session.files, self.prompt, CREDITS_PER_TURN)
        await self.agent.notify(METADATA, self._metadata(**extra))

    def _metadata(self, **extra: Any) -> dict[str, Any]:
        return {
            "sessionId": self.session.session_id,
            "contextUsagePercentage": round(min(100.0, self.session.chars / CHARS_PER_CONTEXT_PERCENT), 3),
            "meteringUsage": [{"unit": "credit", "unitPlural": "credits", "value": CREDITS_PER_TURN}],
            "turnDurationMs": int((time.monotonic() - self.started) * 1000),
            **extra,
        }

    async def _until_cancelled(self, awaitable: Any) -> Any:
        work = asyncio.ensure_future(awaitable)
        cancelled = asyncio.ensure_future(self.session.cancel_event.wait())
        try:
            done, _ = await asyncio.wait({work, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            cancelled.cancel()
            raise
        cancelled.cancel()
        if work in done:
            return work.result()
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        raise TurnCancelled

    async def _steer(self) -> None:
        while self.session.steering:
            await self._say(self.session.steering.pop(0))

    # -- updates -----------------------------------------------------------------

    async def _update(self, update: dict[str, Any], meta: dict[str, Any] | None = None) -> None:
        await self.agent.send_update(self.session.session_id, update, meta)

    async def _say(self, text: str, meta: dict[str, Any] | None = None) -> None:
        self.reply.append(text)
        await self._update(acp_shapes.message_chunk("agent_message_chunk", text), meta)

    async def _start_tool(self, call_id: str, title: str, tool_name: str, *, kind: ToolKind | None = None,
                          raw_input: Any = None, content: list[Any] | None = None,
                          locations: list[Any] | None = None, server: str | None = None) -> None:
        kiro_meta: dict[str, Any] = {"toolName": tool_name}
        if server is not None:
            kiro_meta["mcpServerName"] = server  # as kiro-cli names an MCP-served call
        await self._update(acp_shapes.tool_call(
            call_id, title, kind or _KINDS.get(tool_name, "other"), raw_input=raw_input,
            content=content, locations=locations, meta={"kiro": kiro_meta}))

    async def _tool_progress(self, call_id: str, status: ToolCallStatus, *, raw_output: Any = None,
                             content: list[Any] | None = None) -> None:
        await self._update(acp_shapes.tool_call_update(call_id, status, raw_output=raw_output, content=content))

    # -- permissions -------------------------------------------------------------

    def _tool_trusted(self, server: str | None, name: str) -> bool:
        """Does the session trust the whole tool (``--trust-tools``, "Always", ``allowedTools``, ``autoApprove``)?"""
        options = self.agent.options
        if (f"@{server}/{name}" if server else name) in self.session.always_allowed:
            return True
        if commands.matches(options.trust_tools, server, name, star_means_all=True):
            return True
        if commands.matches(self.session.agent.allowed_tools, server, name, star_means_all=False):
            return True
        if server and self.session.hub is not None:
            conn = self.session.hub.conns.get(server)
            if conn is not None and (name in conn.spec.auto_approve or "*" in conn.spec.auto_approve):
                return True
        return False

    def _verdict(self, server: str | None, name: str, check: Check | None) -> permissions.Verdict:
        if self.agent.options.trust_all_tools:
            return permissions.ALLOW
        trusted = self._tool_trusted(server, name)
        return check(trusted) if check is not None else permissions.trusted_or_ask(trusted)

    async def _permitted(self, call_id: str, title: str, server: str | None, name: str, *,
                         check: Check | None = None, trust_options: list[dict[str, Any]] | None = None) -> bool:
        """May the call run? A call the settings deny, or the client rejects, is reported failed here
        and the turn goes on; a ``cancelled`` answer cancels the turn."""
        verdict = self._verdict(server, name, check)
        if verdict.outcome == "deny":
            await self._tool_progress(call_id, "failed", raw_output={"error": verdict.reason})
            return False
        if verdict.outcome == "allow":
            return True
        assert self.agent.wire is not None
        # kiro-cli puts trustOptions in the request's ``_meta``.
        answer = await self._until_cancelled(self.agent.wire.request(
            "session/request_permission", acp_shapes.permission_request(
                self.session.session_id, call_id, title, {"trustOptions": trust_options or []})))
        outcome, option_id = acp_shapes.permission_outcome(answer)
        if outcome != "selected":
            raise TurnCancelled
        if option_id == "allow_always":
            self.session.always_allowed.add(f"@{server}/{name}" if server else name)
            return True
        if option_id == "allow_once":
            return True
        await self._tool_progress(call_id, "failed", raw_output={"error": REJECTED})
        return False

    # -- steps -------------------------------------------------------------------

    async def _step(self, step: script.Step) -> None:
        handler = getattr(self, f"_do_{step.kind}")
        await handler(step)

    async def _do_text(self, step: script.Step) -> None:
        await self._say(step.text)

    async def _do_say(self, step: script.Step) -> None:
        await self._say(step.text)

    async def _do_recall(self, step: script.Step) -> None:
        earlier = [entry["text"] for entry in sessions.read_transcript(self.session.files)
                   if entry.get("role") == "user"][:-1]  # the last one is this prompt
        await self._say("recall: " + " | ".join(earlier))

    async def _do_subagent(self, step: script.Step) -> None:
        child = sessions.write_subagent(self.session.files, str(self.session.cwd), step.text, f"done: {step.text}")
        await self._say(f"subagent: {child}")

    async def _do_result(self, step: script.Step) -> None:
        await self._say(f"result: {self.last_result if self.last_result is not None else 'none'}\n")

    async def _do_settings(self, step: script.Step) -> None:
        session = self.session
        await self._say(f"settings: model={session.model_id} mode={session.agent.name} "
                        f"effort={session.effort or 'none'}")

    async def _do_context(self, step: script.Step) -> None:
        await self._say("context:\n" + self.session.context)

    async def _do_think(self, step: script.Step) -> None:
        await self._update(acp_shapes.message_chunk("agent_thought_chunk", step.text))

    async def _do_plan(self, step: script.Step) -> None:
        await self._update(acp_shapes.plan(list(step.items)))

    async def _do_todo(self, step: script.Step) -> None:
        call_id = _call_id()
        await self._start_tool(call_id, "Update TODO list", "todo_list",
                               raw_input={"command": "create", "tasks": list(step.items)})
        await self._tool_progress(call_id, "completed", raw_output={
            "todos": [{"content": item, "status": "pending"} for item in step.items]})

    async def _do_tool(self, step: script.Step) -> None:
        call_id = _call_id()
        await self._start_tool(call_id, f"Running {step.name}", step.name, raw_input=step.data)
        if not await self._permitted(call_id, f"Running {step.name}", None, step.name):
            return
        await self._tool_progress(call_id, "in_progress")
        await self._tool_progress(call_id, "completed", raw_output={"tool": step.name, "input": step.data,
                                                                    "result": "ok"})

    async def _do_write(self, step: script.Step) -> None:
        path = self._path(step.name)
        try:
            old: str | None = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            old = None
        except (OSError, UnicodeDecodeError):
            old = None
        title = f"{'Editing' if old is not None else 'Creating'} {path}"
        call_id = _call_id()
        await self._start_tool(
            call_id, title, "write", raw_input={"command": "create", "path": str(path), "content": step.text},
            content=[acp_shapes.diff_content(str(path), step.text, old)], locations=[acp_shapes.location(str(path))])
        if not await self._permitted(call_id, title, None, "write", check=self._path_check(path, "write"),
                                     trust_options=permissions.write_trust_options(path)):
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(step.text, encoding="utf-8")
        except OSError as exc:
            await self._tool_progress(call_id, "failed", raw_output={"error": exc.strerror or str(exc)})
            return
        await self._tool_progress(call_id, "completed", raw_output={"path": str(path), "bytes": len(step.text)})

    def _path(self, name: str) -> Path:
        path = Path(name)
        return path if path.is_absolute() else self.session.cwd / path

    def _path_check(self, path: Path, tool: Literal["read", "write"]) -> Check:
        tools_settings = self.session.agent.tools_settings
        settings = tools_settings.read if tool == "read" else tools_settings.write
        cwd = self.session.cwd
        return lambda trusted: permissions.path_verdict(path, settings, cwd, tool_allowed=trusted)

    async def _do_read(self, step: script.Step) -> None:
        path = self._path(step.name)
        title = f"Reading {path}"
        call_id = _call_id()
        await self._start_tool(call_id, title, "read",
                               raw_input={"operations": [{"mode": "Line", "path": str(path)}]},
                               locations=[acp_shapes.location(str(path))])
        if not await self._permitted(call_id, title, None, "read", check=self._path_check(path, "read"),
                                     trust_options=permissions.read_trust_options(path)):
            return
        await self._tool_progress(call_id, "in_progress")
        try:
            text = await asyncio.to_thread(_read_head, path, OUTPUT_LIMIT)
        except OSError as exc:
            await self._tool_progress(call_id, "failed", raw_output={"error": exc.strerror or str(exc)})
            return
        await self._tool_progress(call_id, "completed", raw_output={"path": str(path), "content": text},
                                  content=[acp_shapes.text_content(text)] if text else None)

    async def _do_fetch(self, step: script.Step) -> None:
        from kirocrew_testing.fake_kiro import local_fetch  # urllib.request pulls in ssl: only for !fetch

        url = step.text
        title = f"Fetching {url}"
        call_id = _call_id()
        await self._start_tool(call_id, title, "web_fetch", raw_input={"url": url})
        if not await self._permitted(call_id, title, None, "web_fetch"):
            return
        refused = local_fetch.refusal(url)
        if refused is not None:
            await self._tool_progress(call_id, "failed", raw_output={"error": refused})
            return
        await self._tool_progress(call_id, "in_progress")
        try:
            page = await self._until_cancelled(asyncio.to_thread(local_fetch.fetch, url, OUTPUT_LIMIT))
        except OSError as exc:
            await self._tool_progress(call_id, "failed", raw_output={"error": str(exc)})
            return
        await self._tool_progress(
            call_id, "failed" if page.status >= 400 else "completed",
            raw_output={"url": url, "status": page.status, "body": page.body},
            content=[acp_shapes.text_content(page.body)] if page.body else None)

    async def _do_shell(self, step: script.Step) -> None:
        call_id = _call_id()
        await self._start_tool(call_id, step.text, "shell", raw_input={"command": step.text})
        settings = self.session.agent.tools_settings.shell
        if not await self._permitted(
                call_id, step.text, None, "shell",
                check=lambda trusted: permissions.shell_verdict(step.text, settings, tool_allowed=trusted),
                trust_options=permissions.shell_trust_options(step.text)):
            return
        await self._tool_progress(call_id, "in_progress")
        code, out, err = await self._run_shell(step.text)
        await self._tool_progress(
            call_id, "completed" if code == 0 else "failed",
            raw_output={"exitStatus": code, "stdout": out, "stderr": err},
            content=[acp_shapes.text_content(out or err)] if (out or err) else None)

    async def _run_shell(self, command: str) -> tuple[int, str, str]:
        from kirocrew_core import proc

        child = await proc.spawn_async(["sh", "-c", command], env=dict(os.environ), cwd=self.session.cwd,
                                       stdin=proc.DEVNULL)
        talk = asyncio.ensure_future(child.communicate())
        try:
            out, err = await self._until_cancelled(asyncio.wait_for(asyncio.shield(talk), SHELL_TIMEOUT_SECS))
        except asyncio.TimeoutError:
            talk.cancel()
            await proc.terminate_async(child, reason="shell timeout")
            return -1, "", f"timed out after {SHELL_TIMEOUT_SECS:g}s"
        except BaseException:
            talk.cancel()
            await proc.terminate_async(child, reason="turn cancelled")
            raise
        return (child.returncode if child.returncode is not None else -1,
                out.decode("utf-8", "replace")[:OUTPUT_LIMIT], err.decode("utf-8", "replace")[:OUTPUT_LIMIT])

    async def _do_mcp(self, step: script.Step) -> None:
        server, tool = step.text, step.name
        call_id = _call_id()
        title = f"Running {tool} from {server}"
        await self._start_tool(call_id, title, tool, raw_input=step.data, server=server)
        hub = self.session.hub
        conn = hub.conns.get(server) if hub is not None else None
        usable = {t.name for t in conn.usable_tools()} if conn is not None and conn.status == "running" else set()
        if tool not in usable or not commands.matches(self.session.agent.tools, server, tool, star_means_all=True):
            why = (f"MCP server {server!r} is {conn.status}" if conn is not None and conn.status != "running"
                   else f"tool {tool!r} of MCP server {server!r} is not available")
            self.last_result = why
            await self._tool_progress(call_id, "failed", raw_output={"error": why})
            return
        if not await self._permitted(call_id, title, server, tool):
            self.last_result = "the call was not permitted"
            return
        await self._tool_progress(call_id, "in_progress")
        try:
            result = await self._until_cancelled(hub.call_tool(server, tool, step.data))  # type: ignore[union-attr]
        except TurnCancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - the tool call is reported failed
            self.last_result = str(exc) or type(exc).__name__
            await self._tool_progress(call_id, "failed", raw_output={"error": self.last_result})
            return
        texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
        self.last_result = "".join(texts)
        await self._tool_progress(
            call_id, "failed" if result.is_error else "completed",
            raw_output=result.model_dump(mode="json", by_alias=True, exclude_none=True),
            content=[acp_shapes.text_content(t) for t in texts] or None)

    async def _do_sleep(self, step: script.Step) -> None:
        await self._until_cancelled(asyncio.sleep(step.number))

    async def _do_hang(self, step: script.Step) -> None:
        await self._until_cancelled(asyncio.Event().wait())

    async def _do_error(self, step: script.Step) -> None:
        raise RpcError(int(step.number), step.text)

    async def _do_refuse(self, step: script.Step) -> None:
        await self.agent.notify(METADATA, self._metadata(
            stopReason="CONTENT_FILTERED",
            refusal={"category": "content_filtered", "explanation": "The response was blocked by a content filter.",
                     "recommendedModel": None}))
        raise RpcError(-32603, "Internal error")

    async def _do_notify(self, step: script.Step) -> None:
        # Raw, not through ext_notification: the method goes out exactly as the script wrote it.
        if self.agent.wire is not None:
            await self.agent.wire.notify(step.name, step.data, raw=True)

    async def _do_exit(self, step: script.Step) -> None:
        await self.agent.crash(int(step.number))

