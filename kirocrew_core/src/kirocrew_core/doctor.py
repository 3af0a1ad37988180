"""Running every ``doctor_checks()`` contribution, each isolated from the others."""

from __future__ import annotations

from dataclasses import dataclass

from kirocrew_core.contributions import DoctorCheck, DoctorResult, flatten
from kirocrew_core.plugins import KirocrewPluginManager, collect


@dataclass(frozen=True)
class DoctorOutcome:
    plugin: str
    check: DoctorCheck
    result: DoctorResult

    def as_dict(self) -> dict[str, str]:
        return {
            "plugin": self.plugin,
            "check": self.check.name,
            "status": self.result.status,
            "summary": self.result.summary,
            "detail": self.result.detail,
        }


def run_checks(pm: KirocrewPluginManager) -> list[DoctorOutcome]:
    """Run every check; a check that raises is a ``fail`` naming the exception."""
    outcomes = []
    for contribution in flatten(collect(pm, "doctor_checks")):
        check = contribution.value
        try:
            result = check.run()
            if not isinstance(result, DoctorResult):
                raise TypeError(f"returned {type(result).__name__}, not DoctorResult")
        except Exception as exc:  # noqa: BLE001 - a broken check is reported as failed
            result = DoctorResult("fail", "the check itself failed", f"{type(exc).__name__}: {exc}")
        outcomes.append(DoctorOutcome(contribution.plugin, check, result))
    return outcomes
