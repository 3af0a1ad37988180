// One conversation's page. While a run is unfinished it polls GET /api/conversations/{id} every few
// seconds and, when the answer's revision differs from the page's, redraws the live part (#live) from
// this page's own server-rendered HTML. Buttons inside #live (answer a permission, cancel a run) work
// by delegation, so they keep working after a redraw. Every change goes through /api/conversations.
import { api, announce, ApiError, clearFieldErrors, fetchPage } from "/static/core/shell.js";
import { ready, showError, values } from "./forms.js";

let live = document.getElementById("live");
const id = live.dataset.conversation;
const base = `/api/conversations/${encodeURIComponent(id)}`;
const pollMs = Number(live.dataset.pollSeconds || 2) * 1000;
let timer = null;

async function redraw() {
  let page;
  try {
    page = await fetchPage();
  } catch (err) {
    if (err.code === "page_reload") return; // the next poll reads it again
    throw err;
  }
  const fresh = page.getElementById("live");
  if (!fresh) return;
  const focused = document.activeElement && live.contains(document.activeElement) ? document.activeElement.id : null;
  // Event lists the reader opened stay open (matched by their summary's id).
  const open = new Set([...live.querySelectorAll("details[open] > summary")].map((s) => s.id));
  for (const summary of fresh.querySelectorAll("details > summary")) {
    if (open.has(summary.id)) summary.parentElement.open = true;
  }
  // What the reader has chosen or typed on an open question card survives the redraw.
  for (const kept of live.querySelectorAll("[data-keep]")) {
    const twin = kept.id && fresh.querySelector(`#${CSS.escape(kept.id)}`);
    if (twin) {
      twin.value = kept.value;
      twin.checked = kept.checked;
    }
  }
  // A new attention card is role="alert": inserting it is what announces it.
  live.replaceWith(fresh);
  live = fresh;
  ready(live);
  hideSkippedFollowUps();
  if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
}

let lastProblem = null;

async function check() {
  timer = null;
  try {
    const detail = await api(base);
    lastProblem = null;
    if (detail.revision !== live.dataset.revision) await redraw();
  } catch (err) {
    // Said once, not every poll; a conversation deleted meanwhile ends the polling.
    if (err.message !== lastProblem) announce(`Could not refresh: ${err.message}`, { urgent: true });
    lastProblem = err.message;
    if (err.code === "conversation_not_found") return;
  }
  schedule();
}

function schedule() {
  if (timer === null && live.dataset.live === "true") timer = window.setTimeout(check, pollMs);
}

async function refreshNow() {
  if (timer !== null) window.clearTimeout(timer);
  timer = null;
  await check();
}

// Follow-up cards (suggest_followup): "Use" only fills the message box, the person still presses Send;
// "Skip" hides this card in this browser (a newer card, with another data-card stamp, shows again).
const skippedKey = `kirocrew.followups.skipped.${id}`;

function hideSkippedFollowUps() {
  const card = document.getElementById("followups");
  if (card && window.localStorage.getItem(skippedKey) === card.dataset.card) card.hidden = true;
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("#followups button[data-followup]");
  if (!button) return;
  const card = document.getElementById("followups");
  if (button.dataset.followup === "skip") {
    window.localStorage.setItem(skippedKey, card.dataset.card);
    card.hidden = true;
    announce("Follow-ups skipped");
    return;
  }
  const box = document.getElementById("send-message");
  if (!box) return;
  box.value = button.dataset.prompt;
  box.focus();
  announce("The follow-up's message is in the message box; press Send to send it");
});
hideSkippedFollowUps();

document.addEventListener("click", async (event) => {
  const button = event.target.closest("#live button[data-action]");
  if (!button) return;
  const run = encodeURIComponent(button.dataset.run);
  button.disabled = true;
  try {
    if (button.dataset.action === "decide") {
      const path = `${base}/runs/${run}/permissions/${encodeURIComponent(button.dataset.permission)}`;
      const body = { decision: button.dataset.decision };
      if (body.decision === "allow_always") {
        body.scope = button.parentElement.querySelector("[data-always-scope]").value;
      }
      const done = await api(path, { method: "POST", body });
      const added = done.rulesAdded && done.rulesAdded.length ? ` (policy rule ${done.rulesAdded.join(", ")} added)` : "";
      announce(`Your answer was recorded: ${button.textContent}${added}`);
    } else if (button.dataset.action === "dismiss-question") {
      await answerQuestion(button.dataset.ask, { dismissed: true });
      announce("The question card was dismissed");
    } else if (button.dataset.action === "cancel") {
      const done = await api(`${base}/runs/${run}/cancel`, { method: "POST" });
      announce(`Run ${done.changed ? "cancelled" : "had already ended"}: ${done.status}`);
    }
  } catch (err) {
    announce(`Not done: ${err.message} (${err.code || "error"})`, { urgent: true });
    button.disabled = false;
    button.focus();
  }
  await refreshNow();
});

async function answerQuestion(askId, body) {
  try {
    return await api(`${base}/questions/${encodeURIComponent(askId)}`, { method: "POST", body });
  } catch (err) {
    if (err.code === "question_not_found") announce("The question was already answered, dismissed or withdrawn");
    throw err;
  }
}

// One answer per question: the chosen option labels (comma-separated for multi-select) and the typed
// answer; a question left blank is left out.
function answersOf(form) {
  const answers = [];
  for (const fieldset of form.querySelectorAll("fieldset.question")) {
    const question = fieldset.querySelector(".question-text").textContent;
    const picked = [...fieldset.querySelectorAll("input:checked")].map((input) => input.value);
    const typed = fieldset.querySelector("input.other").value.trim();
    if (typed) picked.push(typed);
    if (picked.length) answers.push({ question, answer: picked.join(", ") });
  }
  return answers;
}

// A refusal shown on a card is stale once the reader changes an answer.
document.addEventListener("input", (event) => {
  const form = event.target.closest && event.target.closest("#live form.question-form");
  if (form) form.querySelector(".question-problem").hidden = true;
});

document.addEventListener("submit", async (event) => {
  const form = event.target.closest("#live form.question-form");
  if (!form) return;
  event.preventDefault();
  const problem = form.querySelector(".question-problem");
  problem.hidden = true;
  const answers = answersOf(form);
  if (!answers.length) {
    problem.textContent = "Choose an option or type an answer first (or dismiss the card).";
    problem.hidden = false;
    announce(problem.textContent, { urgent: true });
    return;
  }
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    await answerQuestion(form.dataset.ask, { answers });
    announce("Your answer was sent to Kiro");
  } catch (err) {
    // A refused answer leaves the card open, so it can be shortened and sent again.
    problem.textContent = `Not sent: ${err.message} (${err.code || "error"})`;
    problem.hidden = false;
    announce(problem.textContent, { urgent: true });
    button.disabled = false;
    if (err.code !== "question_not_found") return;
  }
  await refreshNow();
});

const sendForm = document.getElementById("send-form");
if (sendForm) {
  sendForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(sendForm);
    const button = sendForm.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const sent = await api(`${base}/messages`, { method: "POST", body: values(sendForm) });
      sendForm.reset();
      announce(sent.delivery === "interrupt"
        ? `Sent; it interrupted the running run and replaced ${sent.supersededRunCount} queued run(s)`
        : `Sent; ${sent.queuePosition ? `${sent.queuePosition} run(s) ahead of it` : "it runs next"}`);
      live.dataset.live = "true";
      await refreshNow();
    } catch (err) {
      if (err instanceof ApiError) showError(sendForm, "send", err, "Not sent");
      else announce(`Not sent: ${err}`, { urgent: true });
    } finally {
      button.disabled = false;
    }
  });
}

// The Kiro session: release the worker and show kiro-cli's resume command; repair its images.
const sessionReport = document.getElementById("session-report");
async function sessionAction(button, route, done, refused) {
  button.disabled = true;
  try {
    const out = await api(`${base}/${route}`, { method: "POST" });
    sessionReport.textContent = done(out);
    announce(sessionReport.textContent);
  } catch (err) {
    sessionReport.textContent = `${refused}: ${err.message} (${err.code || "error"})`;
    announce(sessionReport.textContent, { urgent: true });
  } finally {
    button.disabled = false;
  }
}

const openButton = document.getElementById("session-open");
if (openButton) {
  const command = document.getElementById("session-command");
  openButton.addEventListener("click", () => sessionAction(openButton, "open", (out) => {
    command.textContent = out.command;
    command.hidden = false;
    return "Worker released: run the command below in a terminal to carry the conversation on.";
  }, "Not released"));
}

const repairButton = document.getElementById("session-repair");
if (repairButton) {
  repairButton.addEventListener("click", () => sessionAction(repairButton, "repair", (out) =>
    `Repaired: ${out.images} image(s) found, ${out.downscaled} downscaled, ${out.removed} removed, `
    + `${out.imagesLeft} left; originals kept as ${out.backups.join(", ") || "nothing (nothing changed)"}.`,
  "Not repaired"));
}

const archiveButton = document.getElementById("archive-button");
if (archiveButton) {
  archiveButton.addEventListener("click", async () => {
    archiveButton.disabled = true;
    try {
      await api(`${base}/archive`, { method: "POST" });
      announce("Archived");
      window.location.reload();
    } catch (err) {
      announce(`Not archived: ${err.message} (${err.code || "error"})`, { urgent: true });
      archiveButton.disabled = false;
    }
  });
}

const deleteForm = document.getElementById("delete-form");
if (deleteForm) {
  deleteForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(deleteForm);
    const typed = deleteForm.elements.confirmName.value;
    const error = { code: "confirmation_mismatch", message: `type the exact name ${live.dataset.name} to delete it` };
    if (typed !== live.dataset.name) {
      showError(deleteForm, "delete", error, "Not deleted");
      return;
    }
    try {
      await api(base, { method: "DELETE", body: { confirmName: typed } });
      announce("Deleted");
      window.location.assign("/conversations?archive=archived");
    } catch (err) {
      showError(deleteForm, "delete", err, "Not deleted");
    }
  });
}

const configForm = document.getElementById("config-form");
if (configForm) {
  configForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(configForm);
    const button = configForm.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const saved = await api(`${base}/settings`, { method: "PATCH", body: values(configForm) });
      const d = saved.defaults;
      announce(`Saved: model ${d.model || "default"}, agent ${d.mode || "default"}, effort ${d.effort || "default"}, `
        + `authority ${d.authority}`);
      await refreshNow();
    } catch (err) {
      if (err instanceof ApiError) showError(configForm, "config", err, "Not saved");
      else announce(`Not saved: ${err}`, { urgent: true });
    } finally {
      button.disabled = false;
    }
  });
}

// The worktree report as text: a list of facts and the changed files.
function showWorktree(report) {
  const target = document.getElementById("worktree-report");
  const list = document.createElement("ul");
  const facts = [
    `Branch ${report.branch}, based on ${report.baseRef}${report.baseCommit ? ` at ${report.baseCommit.slice(0, 12)}` : ""}`,
    report.clean ? "No uncommitted changes" : "Uncommitted changes",
    `Merge state: ${report.mergeState}`,
    `Unfinished runs: ${report.activeRuns}`,
    `Ignored files: ${report.ignoredFiles}`,
    `Changed files: ${report.changedFiles.length}${report.changedFilesTruncated ? "+" : ""}`,
    ...report.changedFiles.map((file) => `${file.status} ${file.path}`),
  ];
  for (const fact of facts) {
    const item = document.createElement("li");
    item.textContent = fact;
    list.append(item);
  }
  target.replaceChildren(list);
}

const inspect = document.getElementById("worktree-inspect");
if (inspect) {
  inspect.addEventListener("click", async () => {
    try {
      showWorktree(await api(`${base}/worktree`));
    } catch (err) {
      announce(`Not inspected: ${err.message} (${err.code || "error"})`, { urgent: true });
    }
  });
  const cleanup = document.getElementById("worktree-cleanup");
  cleanup.addEventListener("click", async () => {
    cleanup.disabled = true;
    try {
      const done = await api(`${base}/worktree/cleanup`, { method: "POST" });
      announce(`Cleaned up: branch ${done.removedBranch} removed; the conversation is ${done.state}`);
      window.location.reload();
    } catch (err) {
      announce(`Not cleaned up: ${err.message} (${err.code || "error"})`, { urgent: true });
      cleanup.disabled = false;
    }
  });
}

ready();
schedule();
