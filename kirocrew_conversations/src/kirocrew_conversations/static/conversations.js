// The Conversations list page: starts a conversation through POST /api/conversations (kiro_spawn)
// and opens its page. A refused start is shown at its field.
import { api, announce, ApiError, clearFieldErrors } from "/static/core/shell.js";
import { ready, showError, values } from "./forms.js";

const form = document.getElementById("start-form");
if (form) {
  const button = form.querySelector("button[type=submit]");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    const body = values(form);
    if (body.workspaceMode !== "worktree") delete body.baseRef;
    button.disabled = true;
    try {
      const started = await api("/api/conversations", { method: "POST", body });
      announce(`Started conversation ${body.name}`);
      window.location.assign(`/conversations/${encodeURIComponent(started.conversationId)}`);
    } catch (err) {
      if (err instanceof ApiError) showError(form, "start", err, "Not started");
      else announce(`Not started: ${err}`, { urgent: true });
      button.disabled = false;
    }
  });
}
ready();
