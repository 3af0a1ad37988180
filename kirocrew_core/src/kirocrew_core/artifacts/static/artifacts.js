// The Artifacts page. Every change goes through the owner-authenticated /api/artifacts and /api/deploys routes;
// then the page's regions are swapped for their fresh server-rendered copies (shell.js's redrawRegions), so what a
// state looks like is decided by the templates alone. While the page is open and visible it polls /api/artifact-changes
// every few seconds (a stat-only digest) and redraws the same way when something else changed the artifact.
// Selecting text in the content fills in the comment's quote, which anchors the comment to that passage.
import { announce, api, clearFieldErrors, onButtons, ready, redrawRegions, showFieldError } from "/static/core/shell.js";

const live = document.getElementById("live");
const slug = live?.dataset.watch || "";
const REGIONS = slug
  ? ["artifact-head", "versions", "diff", "content", "comments-open", "comment-list", "actions", "deploys", "activity"]
  : ["library", "deploys"];
const path = (rest = "") => `/api/artifacts/${encodeURIComponent(slug)}${rest}`;

async function redraw() {
  await redrawRegions(REGIONS);
}

// Run one change, say what happened, redraw; a button the redraw took away leaves the keyboard at `landing`.
async function act(button, work, done, landing) {
  if (button) button.disabled = true;
  try {
    const answer = await work();
    announce(done(answer));
    await redraw();
    if (button && !document.contains(button)) {
      const target = [landing, "actions-heading"].map((id) => id && document.getElementById(id)).find(Boolean);
      target?.focus();
    }
    return answer;
  } catch (err) {
    if (button) button.disabled = false;
    announce(`${err.message} (${err.code})`, { urgent: true });
    return null;
  }
}

// -- buttons ----------------------------------------------------------------------------------------------------

const ACTIONS = {
  resolve: (b) => act(b, () => api(path(`/comments/${encodeURIComponent(b.dataset.id)}/resolve`), { method: "POST" }),
    () => "Comment resolved.", "comments-heading"),
  star: (b) => act(b, () => api(path("/star"), { method: "POST", body: { starred: b.dataset.starred === "true" } }),
    (a) => (a.starred ? "Starred." : "Unstarred."), "actions-heading"),
  revert: (b) => act(b, () => api(path("/revert"), { method: "POST", body: { version: Number(b.dataset.version) } }),
    (a) => `Reverted to v${a.reverted_to}: the live version is now v${a.version}.`, "content-heading"),
  confirm: (b) => act(b, () => api(`/api/deploys/${encodeURIComponent(b.dataset.id)}/confirm`, { method: "POST" }),
    (a) => a.published, "deploys-heading"),
  discard: (b) => act(b, () => api(`/api/deploys/${encodeURIComponent(b.dataset.id)}/discard`, { method: "POST" }),
    () => "Deploy discarded.", "deploys-heading"),
  reply: (b) => {
    const form = document.getElementById(`reply-${b.dataset.id}`);
    form.hidden = !form.hidden;
    b.setAttribute("aria-expanded", String(!form.hidden));
    if (!form.hidden) form.querySelector("textarea").focus();
  },
  delete: async (b) => {
    if (!window.confirm(`Delete ${b.dataset.slug} with its versions and comments?`)) return;
    b.disabled = true;
    try {
      await api(path(), { method: "DELETE" });
      window.location.assign("/artifacts");
    } catch (err) {
      b.disabled = false;
      announce(`${err.message} (${err.code})`, { urgent: true });
    }
  },
};

onButtons(ACTIONS);

// -- forms ------------------------------------------------------------------------------------------------------

document.addEventListener("submit", async (event) => {
  const form = event.target;
  if (form.id === "comment-form") {
    event.preventDefault();
    clearFieldErrors(form);
    const text = form.elements.namedItem("text");
    const quote = form.elements.namedItem("quote");
    const error = document.getElementById("comment-form-error");
    const button = form.querySelector("button[type=submit]");
    if (!text.value.trim()) {
      showFieldError(text, "Write the comment first.", { error });
      return;
    }
    button.disabled = true;
    try {
      await api(path("/comments"), { method: "POST", body: { text: text.value, quote: quote.value.trim() || null } });
      form.reset();
      announce("Comment posted.");
      await redraw();
    } catch (err) {
      const hint = err.code === "quote_not_found"
        ? " Select plain words: markup such as **bold** is in the saved text, not in what the page shows." : "";
      showFieldError(err.code === "quote_not_found" ? quote : text, `${err.message} (${err.code}).${hint}`, { error });
    } finally {
      button.disabled = false;
    }
  } else if (form.classList.contains("reply-form")) {
    event.preventDefault();
    const text = form.elements.namedItem("text");
    if (!text.value.trim()) return;
    await act(form.querySelector("button[type=submit]"), () => api(path("/comments"),
      { method: "POST", body: { text: text.value, parent_id: form.dataset.parent } }), () => "Reply posted.",
    "comments-heading");
  } else if (form.id === "move-form") {
    event.preventDefault();
    clearFieldErrors(form);
    const input = form.elements.namedItem("folder");
    try {
      const moved = await api(path("/move"), { method: "POST", body: { folder: input.value.trim() || null } });
      announce(moved.folder_id ? `Moved to ${moved.folder}.` : "Moved to the library root.");
      await redraw();
    } catch (err) {
      showFieldError(input, `${err.message} (${err.code})`, { error: document.getElementById("move-folder-error") });
    }
  }
});

// -- a selection becomes the comment's quote --------------------------------------------------------------------

function takeSelection() {
  const selection = window.getSelection();
  const area = document.getElementById("artifact-text");
  const quote = document.getElementById("comment-quote");
  if (!selection || selection.isCollapsed || !area || !quote) return;
  if (!area.contains(selection.anchorNode) || !area.contains(selection.focusNode)) return;
  const text = selection.toString().trim();
  if (text) quote.value = text.slice(0, 2000);
}

document.addEventListener("mouseup", takeSelection);
document.addEventListener("keyup", (event) => {
  if (event.shiftKey || event.key === "Shift") takeSelection();
});

// -- live refresh -----------------------------------------------------------------------------------------------

async function poll() {
  if (!document.hidden) {
    try {
      const query = slug ? `?slug=${encodeURIComponent(slug)}` : "";
      const { stamp } = await api(`/api/artifact-changes${query}`);
      if (stamp !== live.dataset.stamp) await redraw();
    } catch (err) {
      if (err.code === "network_error") announce("The dashboard cannot reach kirocrew; retrying.", { urgent: false });
    }
  }
  window.setTimeout(poll, Number(live.dataset.pollSeconds || 3) * 1000);
}

ready(document);
if (live) window.setTimeout(poll, Number(live.dataset.pollSeconds || 3) * 1000);
