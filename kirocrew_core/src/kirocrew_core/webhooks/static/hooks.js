// The Hooks page. Revoke works by delegation on #hooks: DELETE /api/hooks/<id> (owner-authenticated), then
// the table is redrawn from this page's own server-rendered HTML (fetchPage).
import { api, announce, fetchPage } from "/static/core/shell.js";

let section = document.getElementById("hooks");

async function redraw() {
  const page = await fetchPage();
  const fresh = page.getElementById("hooks");
  if (!fresh) return;
  section.replaceWith(fresh);
  section = fresh;
  section.addEventListener("click", onClick);
}

async function onClick(event) {
  const button = event.target.closest("button[data-do='revoke']");
  if (!button || !section.contains(button)) return;
  const id = button.closest("[data-id]").dataset.id;
  if (!window.confirm(`Revoke the hook ${id}? Its URL will refuse every delivery.`)) return;
  button.disabled = true;
  try {
    await api(`/api/hooks/${encodeURIComponent(id)}`, { method: "DELETE" });
    announce(`Hook ${id} revoked.`);
    await redraw();
  } catch (err) {
    button.disabled = false;
    announce(`Could not revoke ${id}: ${err.message}`, { urgent: true });
  }
}

section.addEventListener("click", onClick);
