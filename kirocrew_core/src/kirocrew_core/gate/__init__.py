"""The permission gate: the policy that answers kiro-cli's ``session/request_permission``.

Sessions kirocrew runs are not started with ``--trust-all-tools``, so kiro-cli asks over ACP
before each call its agent file does not already allow. The host answers from a **policy**:
rules with a decision ``allow``, ``ask`` or ``deny`` (deny > ask > allow, whatever the
rules' order or specificity), matching the tool and its input.

- :mod:`.rules` — a rule, its fields, checks and text forms;
- :mod:`.shell` — a shell command reduced to simple commands with a real parser
  (tree-sitter-bash), wrappers unwrapped, redirections as file reads and writes;
- :mod:`.calls` — a tool call as the subjects a decision is about (commands, paths, domains);
- :mod:`.paths` — path and domain patterns;
- :mod:`.protections` — the built-in rules that protect kirocrew itself, and the defaults;
- :mod:`.engine` — :class:`~.engine.Policy`: decide a call, and whether a tool may keep a
  blanket auto-approve (``allowedTools``, ``autoApprove``, ``--trust-tools``);
- :mod:`.policy_file` — the owner's ``policy.toml`` (tomlkit, comments kept), the last good
  policy, project files;
- :mod:`.cli`, :mod:`.api`, :mod:`.page` — ``kirocrew policy``, its routes, the Policy page.

Importing this package is cheap; the parser is loaded by the first decision that needs it.
"""
