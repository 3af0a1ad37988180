#!/usr/bin/env python3
"""Cost of one permission-gate decision (``Policy.decide``) with 500 owner rules, per shape of call.

    .venv/bin/python benchmarks/gate_decision.py [--rules 500] [--calls 3000]

Runs under a throwaway home: 500 owner rules (a realistic mix: shell command allows and denies
with many distinct first words and some globs, path rules, domain rules, MCP tool rules, some
scoped to an authority, an agent or a workspace) are written to ``policy.toml`` and read as the
gate reads them (``current_policy``), with the installed plugins' protections and ceiling. Then
each call shape is decided ``--calls`` times: a simple shell command, a chain of 5 commands, a
file read, a fetch and an MCP call. Prints median, p99 and min per shape (target: ≤ 0.2 ms
median), next to two floors: one ``fnmatchcase`` over 500 patterns, and the shell parse alone.
On a machine busier than its cores, p99 holds preemptions (one scheduler tick, about 4 ms): the
floors meet them too, and the min shows what the engine itself costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _bench import machine_load

if TYPE_CHECKING:
    from kirocrew_core.gate.engine import Verdict

FIRST_WORDS = ("git", "npm", "make", "cargo", "go", "pytest", "docker", "kubectl", "terraform", "ls", "cat", "grep",
               "rg", "find", "sed", "awk", "python", "node", "yarn", "pnpm", "pip", "uv", "ruff", "mypy", "jq")


def owner_rules(count: int, workspace: Path) -> list[dict[str, Any]]:
    """``count`` rules: about half shell, a fifth paths, an eighth domains, the rest MCP tools; every 25th scoped."""
    rules: list[dict[str, Any]] = []
    for i in range(count):
        kind = i % 8
        rule: dict[str, Any]
        if kind < 4:  # shell: distinct first words (tool<i>) beside the usual ones and their subcommands
            if i % 40 == 0:
                rule = {"decision": "deny", "tool": "shell", "command": f"danger{i}"}
            elif i % 12 == 0:
                rule = {"decision": "allow", "tool": "shell", "command": f"{FIRST_WORDS[i % len(FIRST_WORDS)]} run "
                                                                        f"task{i}:*"}
            elif i % 3 == 0:
                rule = {"decision": "allow", "tool": "shell", "command": f"{FIRST_WORDS[i % len(FIRST_WORDS)]} sub{i}"}
            else:
                rule = {"decision": "allow", "tool": "shell", "command": [f"tool{i}", f"tool{i}x --flag"]}
        elif kind < 6:  # paths: relative globs, home globs, slashless names, absolute directories
            shapes = (f"src/mod{i}/**", f"~/notes{i}/*.md", f"*.secret{i}", f"/opt/data{i}/")
            rule = {"decision": ("allow", "deny", "ask")[i % 3], "tool": ("write", "read")[i % 2],
                    "path": shapes[i % len(shapes)]}
        elif kind == 6:  # domains
            rule = {"decision": "deny" if i % 5 == 0 else "allow", "tool": "web_fetch",
                    "domain": [f"host{i}.example.com", f"*.docs{i}.org"]}
        else:  # MCP tools: whole servers, globs, single tools
            servers = (f"@srv{i}", f"@srv{i}/list_*", f"@srv{i}/delete_item")
            rule = {"decision": ("allow", "allow", "deny")[i % 3], "tool": servers[i % 3]}
        if i % 25 == 0:
            scope = (("authority", "read_only"), ("agent", f"agent{i}*"), ("workspace", str(workspace / f"p{i}")))
            key, value = scope[(i // 25) % 3]
            rule[key] = value
        rule["id"] = f"bench-{i}"
        rules.append(rule)
    # What the calls below meet: the usual commands allowed, one MCP server and one domain allowed.
    rules[1] = {"id": "bench-1", "decision": "allow", "tool": "shell",
                "command": ["git status", "git diff", "npm run test:*", "ls", "grep", "make build"]}
    rules[6] = {"id": "bench-6", "decision": "allow", "tool": "web_fetch", "domain": "docs.python.org"}
    rules[7] = {"id": "bench-7", "decision": "allow", "tool": "@github"}
    return rules


def write_policy(path: Path, rules: list[dict[str, Any]]) -> None:
    import tomlkit

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomlkit.dumps({"rule": rules}))


def timed(fn: Callable[[], object], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def line(label: str, samples: list[float]) -> str:
    """``label  median … ms   p99 … ms   min … ms`` (this benchmark's target is on the median and the tail)."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (f"{label:<46} median {statistics.median(ordered):7.4f} ms   p99 {p99:7.4f} ms   "
            f"min {ordered[0]:7.4f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=int, default=500)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    print(machine_load())
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-gate-") as tmp:
        root = Path(tmp)
        os.environ.update(HOME=str(root / "home"), KIRO_HOME=str(root / "home" / ".kiro"),
                          KIROCREW_HOME=str(root / "home" / ".kiro" / "crew"))
        workspace = root / "workspace"
        (workspace / "src" / "mod3").mkdir(parents=True)
        (workspace / "src" / "mod3" / "app.py").write_text("print('hi')\n")
        from fnmatch import fnmatchcase

        from kirocrew_core import home
        from kirocrew_core.gate import shell
        from kirocrew_core.gate.calls import Context, ToolCall
        from kirocrew_core.gate.policy_file import current_policy
        from kirocrew_core.gate.protections import policy_file

        rules = owner_rules(args.rules, workspace)
        write_policy(policy_file(), rules)
        start = time.perf_counter()
        policy = current_policy()
        print(f"policy read and built once: {(time.perf_counter() - start) * 1000:.1f} ms "
              f"({len(policy.owner_rules)} owner rules, {len(policy.builtin_rules)} built-in, "
              f"problems: {policy.problems or 'none'})")
        ctx = Context("workspace_write", "kirocrew", str(workspace), str(home.user_home()))
        chain = "git status && npm run test:unit && ls -la src | grep foo; make build"
        calls = {
            "shell: git status": ToolCall("shell", None, {"command": "git status"}),
            "shell: a chain of 5 commands": ToolCall("shell", None, {"command": chain}),
            "read: src/mod3/app.py": ToolCall("read", None, {"path": "src/mod3/app.py"}),
            "web_fetch: docs.python.org": ToolCall("web_fetch", None, {"url": "https://docs.python.org/3/"}),
            "MCP: @github/list_issues": ToolCall("list_issues", "github", {"repo": "a/b"}),
        }
        patterns = [f"tool{i}*" for i in range(args.rules)]

        def floor_fnmatch() -> None:
            for pattern in patterns:
                fnmatchcase("git", pattern)

        def decide(call: ToolCall) -> Callable[[], Verdict]:
            return lambda: current_policy().decide(call, ctx)

        verdicts = {label: decide(call)() for label, call in calls.items()}  # warm: parser loaded, caches filled
        shell.reduce(chain, cwd=str(workspace), home=str(home.user_home()))
        print(line(f"floor: fnmatchcase over {args.rules} patterns", timed(floor_fnmatch, args.calls)))
        print(line("floor: shell parse of the 5-command chain",
                   timed(lambda: shell.reduce(chain, cwd=str(workspace), home=str(home.user_home())), args.calls)))
        for label, call in calls.items():
            print(line(f"decide {label}", timed(decide(call), args.calls)) + f"   → {verdicts[label].decision}")


if __name__ == "__main__":
    main()
