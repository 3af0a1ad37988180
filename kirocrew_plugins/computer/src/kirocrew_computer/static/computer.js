// The Computer use page: saves the keystone (switch and app lists) through PUT /api/computer-use/config.
// A refused list is shown at its field and announced through the shell's role="alert" region.
import { api, announce, ApiError, clearFieldErrors, showFieldError } from "/static/core/shell.js";

const form = document.getElementById("keystone-form");
const enabled = document.getElementById("keystone-enabled");
const state = document.getElementById("keystone-state");
const button = form.querySelector("button[type=submit]");
const fields = {
  allowed_apps: [document.getElementById("allowed-apps"), document.getElementById("allowed-apps-error")],
  extra_denied_apps: [document.getElementById("denied-apps"), document.getElementById("denied-apps-error")],
};

const lines = (textarea) => textarea.value.split("\n").map((line) => line.trim()).filter((line) => line !== "");

function showError(err) {
  // The server names the list it refused at the start of its message ("allowed_apps entries must ...").
  const key = Object.keys(fields).find((name) => err.message.startsWith(name));
  const alert = `Not saved: ${err.message}`;
  if (key) showFieldError(fields[key][0], err.message, { error: fields[key][1], alert });
  else announce(alert, { urgent: true });
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  clearFieldErrors(form);
  button.disabled = true;
  try {
    const body = {
      enabled: enabled.checked,
      allowed_apps: lines(fields.allowed_apps[0]),
      extra_denied_apps: lines(fields.extra_denied_apps[0]),
    };
    const saved = await api("/api/computer-use/config", { method: "PUT", body });
    enabled.checked = saved.enabled;
    fields.allowed_apps[0].value = saved.allowed_apps.join("\n");
    fields.extra_denied_apps[0].value = saved.extra_denied_apps.join("\n");
    state.textContent = saved.reason;
    state.className = saved.enabled ? "" : "warn";
    announce(`Saved: computer use is ${saved.enabled ? "on" : "off"}`);
  } catch (err) {
    if (err instanceof ApiError) showError(err);
    else announce(`Not saved: ${err}`, { urgent: true });
  } finally {
    button.disabled = false;
  }
});
