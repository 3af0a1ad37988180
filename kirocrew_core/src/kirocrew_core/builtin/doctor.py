"""Core ``kirocrew doctor`` checks: homes writable, config parses, kiro-cli resolvable."""

from __future__ import annotations

import os

from kirocrew_core import home
from kirocrew_core.contributions import DoctorCheck, DoctorResult
from kirocrew_core.markers import hookimpl


def _writable(path: os.PathLike[str] | str) -> tuple[bool, str]:
    import tempfile
    from pathlib import Path

    p = Path(path)
    probe_dir = p
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        return False, f"{probe_dir} is not a directory"
    try:
        with tempfile.NamedTemporaryFile(dir=probe_dir, prefix=".kirocrew-doctor-"):
            pass
    except OSError as exc:
        return False, f"cannot write in {probe_dir}: {exc.strerror or exc}"
    return True, str(p) if p.exists() else f"{p} (will be created)"


def check_homes() -> DoctorResult:
    problems: list[str] = []
    seen: list[str] = []
    for label, path in (("Kiro home", home.kiro_home()), ("crew home", home.crew_home())):
        ok, detail = _writable(path)
        (seen if ok else problems).append(f"{label}: {detail}")
    if problems:
        return DoctorResult("fail", "a home is not writable", "\n".join(problems + seen))
    return DoctorResult("ok", "Kiro home and crew home are writable", "\n".join(seen))


def check_config() -> DoctorResult:
    from kirocrew_core.config import load_config
    from kirocrew_core.errors import KirocrewError

    try:
        load_config()
    except KirocrewError as exc:
        return DoctorResult("fail", "config.toml does not parse", exc.message)
    path = home.config_file()
    return DoctorResult("ok", "config parses", str(path) if path.exists() else f"{path} (defaults)")


def check_kiro_cli() -> DoctorResult:
    from kirocrew_core.kiro import kiro_cli_version, resolve_kiro_cli

    binary = resolve_kiro_cli()
    if binary.path is None:
        return DoctorResult("fail", "kiro-cli not found", binary.problem)
    try:
        version = kiro_cli_version(binary)
    except (RuntimeError, FileNotFoundError) as exc:
        return DoctorResult("fail", "kiro-cli does not run", str(exc))
    return DoctorResult("ok", f"kiro-cli {version}", f"{binary.path} (from {binary.source})")


def check_plugins() -> DoctorResult:
    from kirocrew_core.coretools.tool_names import ToolNameClash, collect_tools
    from kirocrew_core.plugins import get_plugin_manager

    pm = get_plugin_manager()
    try:
        collect_tools(pm)  # records the kirocrew-core tool names a plugin was refused
    except ToolNameClash as exc:
        return DoctorResult("fail", "two open-edition plugins contribute one kirocrew-core tool name", exc.message)
    records = pm.loaded_records()
    skipped = [r for r in records if r.status == "skipped"]
    lines = [f"{r.name} ({r.distribution} {r.version}): {r.error}" for r in skipped]
    refused = [(r, problem) for r in records for problem in r.problems]
    lines += [f"{r.name} ({r.distribution} {r.version}): [{problem.code}] {problem.message}" for r, problem in refused]
    if lines:
        said = [f"{len(skipped)} plugin(s) skipped"] if skipped else []
        said += [f"{len(refused)} plugin contribution(s) refused"] if refused else []
        return DoctorResult("warn", ", ".join(said), "\n".join(lines))
    loaded = sum(1 for r in records if r.status == "loaded")
    return DoctorResult("ok", f"{loaded} plugin(s) loaded")


@hookimpl
def doctor_checks() -> list[DoctorCheck]:
    return [
        DoctorCheck("core.homes", check_homes, "the Kiro and crew homes are writable"),
        DoctorCheck("core.config", check_config, "config.toml parses and its keys are valid"),
        DoctorCheck("core.kiro-cli", check_kiro_cli, "kiro-cli resolves and reports its version"),
        DoctorCheck("core.plugins", check_plugins,
                    "every installed plugin loaded, and none was refused a kirocrew-core tool name"),
    ]
