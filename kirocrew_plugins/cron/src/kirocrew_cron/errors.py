"""The stable error codes kirocrew-cron reports (tools, CLI, page routes): callers branch on the code.

A code here is a promise: its meaning does not change once shipped. Raise with
:func:`cron_error`, which refuses a code missing from :data:`CATALOGUE`.
"""

from __future__ import annotations

from kirocrew_core.coretools.contract import ToolRefused

CATALOGUE: dict[str, str] = {
    "job_not_found": "No job with this id is visible to the caller (unknown, another session's, or the owner's).",
    "invalid_job_id": "A job id must be 1-16 lowercase hex characters.",
    "no_schedule": "cron_add needs one of every, cron_expr, at, delay or at_time.",
    "conflicting_schedule": "More than one of every, cron_expr, at, delay and at_time was given.",
    "invalid_schedule": "The interval, cron expression or instant is not a valid schedule.",
    "invalid_timezone": "The time zone is not a known IANA zone name.",
    "invalid_skip_date": "A skip date is not a real YYYY-MM-DD date.",
    "time_in_past": "A one-shot instant (at, at_time) is already past.",
    "unparseable_time": "at_time is not one of the accepted forms ('5pm', 'in 30 minutes', 'tomorrow 9am', "
                        "'2026-03-28 14:00').",
    "cron_step_out_of_range": "A step in the cron expression is wider than its range (*/60 in minutes, "
                              "*/99999999999999999999): it could match only the range's first value.",
    "name_control_characters": "The job's name holds a control character (a line break, an escape), a "
                               "bidirectional control or another invisible format character: a name is one line.",
    "message_control_characters": "The job's message holds a control character other than a line break or a tab "
                                  "(an escape, NUL, a lone carriage return), a bidirectional control or another "
                                  "invisible format character.",
    "session_jobs_full": "The session already owns as many jobs as one session may (see kirocrew_cron.model); it "
                         "removes one of its own first.",
    "jobs_full": "Sessions together own as many jobs as sessions may, or the store holds as many jobs as it may in "
                 "all; the person's own jobs have room beyond the sessions' share.",
    "no_payload": "A job needs a message (an agent job) or a command (a command job).",
    "conflicting_payload": "A job has either a message or a command, never both.",
    "command_refused": "The command failed vetting (credential paths, secret names, exfiltration shapes, shell "
                       "constructs that hide what runs); nothing was stored or run.",
    "no_fields": "cron_update was given nothing to change.",
    "job_running": "The job is running now; a job never runs twice at once.",
    "scheduler_off": "The host runs without its scheduler (kirocrew serve --no-crons): nothing fires or triggers.",
    "host_required": "This needs the running host (it runs jobs); start it with kirocrew serve.",
    "cron_store_busy": "The cron store is held by another writer; retry.",
    "cron_store_unusable": "The cron store cannot be opened, is damaged, or was written by a newer version.",
    "authority_unavailable": "The job's authority cannot run here; the job is kept and the fire refused.",
    "caller_unverified": "The caller is not a verified kirocrew session nor the kirocrew CLI: it may read nothing "
                         "and write nothing (manage jobs with kirocrew cron).",
    "person_only_field": "authority and cwd are set only by the person (kirocrew cron, the Cron page): a session's "
                         "job runs with its own conversation's authority and working directory.",
    "invalid_workspace": "cwd is not an absolute path to an existing directory.",
    "import_unreadable": "The crons.json to import cannot be read or is not JSON.",
    "person_only_command": "kirocrew cron adopt, preview and import are the person's: a session's kirocrew command "
                           "cannot run them.",
    "conversation_not_found": "kirocrew cron adopt --session-of names no conversation of this host.",
    "conflicting_arguments": "Exactly one of the alternatives was not given (adopt: --session-of or --release; "
                             "preview: a job or --command).",
    "not_a_command_job": "kirocrew cron preview runs command jobs only: an agent job's run is a conversation's, "
                         "which a preview would leave behind.",
}


def cron_error(code: str, message: str) -> ToolRefused:
    """A :class:`ToolRefused` with a catalogued ``code`` (raise it)."""
    if code not in CATALOGUE:
        raise ValueError(f"uncatalogued kirocrew-cron error code {code!r}")
    return ToolRefused(message, code=code)
