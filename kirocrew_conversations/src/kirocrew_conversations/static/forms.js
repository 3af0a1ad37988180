// Field errors for the Conversations pages' forms. A refused request's message names the argument
// ("kiro_spawn: arguments.name has an invalid format", "missing required name"); the field for it
// (id "<prefix>-<argument>") gets the message through the shell's showFieldError.
import { announce, showFieldError } from "/static/core/shell.js";

// The codes that belong to one argument whatever the message says.
const FIELD_OF_CODE = {
  conversation_name_taken: "name",
  workspace_not_found: "workspace",
  not_a_git_repository: "workspace",
  not_repository_root: "workspace",
  repository_dirty: "workspace",
  invalid_base_ref: "baseRef",
  base_ref_not_found: "baseRef",
  unknown_model: "model",
  unknown_mode: "mode",
  authority_unavailable: "authority",
  slash_command_refused: "message",
  confirmation_mismatch: "confirm",
};

function argumentOf(err) {
  if (FIELD_OF_CODE[err.code]) return FIELD_OF_CODE[err.code];
  if (err.field) return err.field;
  const named = /arguments\.([A-Za-z]+)|required ([A-Za-z]+)/.exec(err.message || "");
  return named ? named[1] || named[2] : null;
}

// Shows `err` at its field in `form` (fields are "<prefix>-<argument>") and announces it as an alert.
export function showError(form, prefix, err, what) {
  const name = argumentOf(err);
  const input = name ? document.getElementById(`${prefix}-${name}`) : null;
  const error = name ? document.getElementById(`${prefix}-${name}-error`) : null;
  const alert = `${what}: ${err.message} (${err.code || "error"})`;
  if (input && error) showFieldError(input, `${err.message} (${err.code})`, { error, alert });
  else announce(alert, { urgent: true });
}

// The form's non-empty fields as a JSON object (radio groups give their checked value).
export function values(form) {
  const out = {};
  for (const [key, value] of new FormData(form).entries()) {
    const text = String(value).trim() === "" ? "" : String(value);
    if (text !== "") out[key] = key === "message" ? text : text.trim();
  }
  return out;
}

// Buttons driven by a script are rendered disabled (data-ready) so nothing is submitted before the
// script is listening; the page's script enables them once it is (and after each redraw).
export function ready(root = document) {
  for (const button of root.querySelectorAll("button[data-ready]")) button.disabled = false;
}
