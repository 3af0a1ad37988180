// The Knowledge page and a source's page. Every change goes through the owner-authenticated /api/knowledge and
// /api/skills routes; then the page's regions are swapped for fresh server-rendered copies (shell.js's
// redrawRegions), so what a state looks like is decided by the templates alone. While the page is open and visible it polls
// /api/knowledge-changes (a stat of the library and the host's progress) and redraws when it moved: ingestion's
// progress shows without a reload. The list page redraws from /knowledge itself, so a registry search or a
// skill's files on the page are not fetched from the registry again at every poll.
import { announce, api, clearFieldErrors, onButtons, ready, redrawRegions, showFieldError } from "/static/core/shell.js";

const live = document.getElementById("live");
const source = live?.dataset.source || "";
const LIVE_REGIONS = source ? ["source-head", "documents", "skipped", "excluded"] : ["sources", "add"];

// The list page redraws from /knowledge itself: a registry search on it is not fetched again at every poll.
async function redraw() {
  await redrawRegions(LIVE_REGIONS, source ? undefined : "/knowledge");
}

// Run one change, say what happened, redraw; a button the redraw took away leaves the keyboard at `landing`.
async function act(button, work, done, landing) {
  if (button) button.disabled = true;
  try {
    const answer = await work();
    announce(done(answer));
    await redraw();
    if (button && !document.contains(button)) document.getElementById(landing)?.focus();
    return answer;
  } catch (err) {
    if (button) button.disabled = false;
    announce(`${err.message} (${err.code})`, { urgent: true });
    return null;
  }
}

const sourcePath = (id, rest = "") => `/api/knowledge/sources/${encodeURIComponent(id)}${rest}`;
const post = (path, body) => api(path, { method: "POST", body });
const landing = source ? "documents-heading" : "sources-heading";

const ACTIONS = {
  reindex: (b) => act(b, () => post(sourcePath(b.dataset.id, "/reindex")),
    () => "Reindex started: the state shows its progress.", landing),
  "remove-source": async (b) => {
    if (!window.confirm(`Remove ${b.dataset.name} from the library? Its files are untouched.`)) return;
    if (source) {
      b.disabled = true;
      try {
        await api(sourcePath(b.dataset.id), { method: "DELETE" });
        window.location.assign("/knowledge");
      } catch (err) {
        b.disabled = false;
        announce(`${err.message} (${err.code})`, { urgent: true });
      }
      return;
    }
    await act(b, () => api(sourcePath(b.dataset.id), { method: "DELETE" }), () => "Source removed.", landing);
  },
  "add-lessons": (b) => act(b, () => post("/api/knowledge/sources", { lessons: true }),
    () => "The lessons were added; the host reads them now.", "sources-heading"),
  exclude: (b) => act(b, () => post(sourcePath(b.dataset.id, "/exclude"), { document: b.dataset.document }),
    (a) => `Removed ${a.excluded}; it stays out at every reindex.`, "excluded-heading"),
  include: (b) => act(b, () => post(sourcePath(b.dataset.id, "/include"), { document: b.dataset.document }),
    (a) => `${a.included} is included again; the host reads it now.`, "documents-heading"),
  // After an install the Skills section and the preview are drawn again from this very address.
  install: async (b) => {
    b.disabled = true;
    try {
      const a = await post("/api/skills/install", { id: b.dataset.id, digest: b.dataset.digest });
      announce(`Installed ${a.installed} as ${a.path}.`);
      await redrawRegions(["skills", "registry"]);
      document.getElementById("skills-heading")?.focus();
    } catch (err) {
      b.disabled = false;
      announce(`${err.message} (${err.code})`, { urgent: true });
    }
  },
};

onButtons(ACTIONS);

// -- adding a source ---------------------------------------------------------------------------------------------

document.addEventListener("submit", async (event) => {
  const form = event.target;
  const field = { "add-path": "path", "add-artifact": "artifact" }[form.id];
  if (!field) return;
  event.preventDefault();
  clearFieldErrors(form);
  const input = form.elements.namedItem(field);
  const error = form.querySelector(".field-error");
  if (!input.value.trim()) {
    showFieldError(input, field === "path" ? "Type a folder's or a file's path first." : "Type an artifact's slug first.",
      { error });
    return;
  }
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const { source: added } = await post("/api/knowledge/sources", { [field]: input.value.trim() });
    form.reset();
    announce(`Added ${added.location}; the host reads it now.`);
    await redraw();
  } catch (err) {
    showFieldError(input, `${err.message} (${err.code})`, { error });
  } finally {
    button.disabled = false;
  }
});

// -- live refresh ------------------------------------------------------------------------------------------------

async function poll() {
  if (!document.hidden) {
    try {
      const query = source ? `?source=${encodeURIComponent(source)}` : "";
      const { stamp } = await api(`/api/knowledge-changes${query}`);
      if (stamp !== live.dataset.stamp) await redraw();
    } catch (err) {
      if (err.code === "network_error") announce("The dashboard cannot reach kirocrew; retrying.");
    }
  }
  window.setTimeout(poll, Number(live.dataset.pollSeconds || 2) * 1000);
}

ready(document);
if (live) window.setTimeout(poll, Number(live.dataset.pollSeconds || 2) * 1000);
