// The Workflows page. Cancel works by delegation on #workflows: POST /api/workflows/runs/<id>/cancel
// (owner-authenticated), then the table is redrawn from this page's own server-rendered HTML (fetchPage).
import { api, announce, fetchPage } from "/static/core/shell.js";

let section = document.getElementById("workflows");

async function redraw() {
  const page = await fetchPage();
  const fresh = page.getElementById("workflows");
  if (!fresh) return;
  section.replaceWith(fresh);
  section = fresh;
  section.addEventListener("click", onClick);
}

async function onClick(event) {
  const button = event.target.closest("button[data-do='cancel']");
  if (!button || !section.contains(button)) return;
  const id = button.closest("[data-id]").dataset.id;
  button.disabled = true;
  try {
    await api(`/api/workflows/runs/${encodeURIComponent(id)}/cancel`, { method: "POST" });
    announce(`Workflow run ${id} cancelled.`);
    await redraw();
  } catch (err) {
    button.disabled = false;
    announce(`Could not cancel ${id}: ${err.message}`, { urgent: true });
  }
}

section.addEventListener("click", onClick);
