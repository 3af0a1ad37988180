// The MCP servers page. Scope badge and tool clicks only stage; the changes bar lists them, and only
// Apply writes (POST /api/mcp/apply). Probe, uninstall (after a confirmation), add a custom server
// (POST /api/mcp/servers) and Apply & Restart (POST /api/sessions/restart) call their routes. After any
// of them the page re-reads itself and swaps the server list in: the server renders, this only stages.
import { api, announce, clearFieldErrors, fetchPage, showFieldError } from "/static/core/shell.js";

const POLL_MS = 2000; // while a background probe runs, re-read the list this often
const CREW = "kirocrew";
const staged = new Map(); // server name -> { scopes: Map(scopeId -> bool), tools: Map(tool -> bool) }
let busy = false;
let pollTimer = null;

const $ = (id) => document.getElementById(id);
const rows = () => [...document.querySelectorAll("#servers-region tbody tr[data-name]")];
const rowOf = (name) => rows().find((tr) => tr.dataset.name === name);
const crewPath = () => $("servers-region")?.dataset.crewPath || "the crew store";

function entryFor(name) {
  if (!staged.has(name)) staged.set(name, { scopes: new Map(), tools: new Map() });
  return staged.get(name);
}

function prune(name) {
  const entry = staged.get(name);
  if (entry && entry.scopes.size === 0 && entry.tools.size === 0) staged.delete(name);
}

// A click stages the inverse of what the button shows; going back to what is on disk drops the change.
function stage(kind, button) {
  const name = button.closest("tr").dataset.name;
  const key = kind === "scopes" ? button.dataset.scope : button.dataset.tool;
  const disk = (kind === "scopes" ? button.dataset.on : button.dataset.enabled) === "true";
  const map = entryFor(name)[kind];
  const next = !(map.has(key) ? map.get(key) : disk);
  if (next === disk) map.delete(key);
  else map.set(key, next);
  prune(name);
  paint();
}

function effective(tr, scopeId) {
  const button = [...tr.querySelectorAll("button[data-scope]")].find((b) => b.dataset.scope === scopeId);
  if (!button) return null;
  const entry = staged.get(tr.dataset.name);
  return entry?.scopes.has(scopeId) ? entry.scopes.get(scopeId) : button.dataset.on === "true";
}

function paintButton(button, disk, pending, on, label) {
  button.setAttribute("aria-pressed", String(on));
  button.classList.toggle("staged", pending);
  button.classList.toggle("on-true", on);
  button.classList.toggle("on-false", !on);
  button.classList.toggle("enabled-true", on);
  button.classList.toggle("enabled-false", !on);
  button.querySelector(".pending").textContent = pending ? ` (pending ${on ? "on" : "off"}, click to revert)` : "";
  button.title = pending ? `${label}: pending ${on ? "enable" : "disable"} (click to revert)`
    : `${label}: ${disk ? "on (click to disable)" : "off (click to enable)"}`;
}

function paint() {
  for (const name of [...staged.keys()]) if (!rowOf(name)) staged.delete(name);
  for (const tr of rows()) {
    const entry = staged.get(tr.dataset.name);
    for (const button of tr.querySelectorAll("button[data-scope]")) {
      const disk = button.dataset.on === "true";
      const pending = Boolean(entry?.scopes.has(button.dataset.scope));
      paintButton(button, disk, pending, pending ? entry.scopes.get(button.dataset.scope) : disk, button.dataset.label);
    }
    for (const button of tr.querySelectorAll("button[data-tool]")) {
      const disk = button.dataset.enabled === "true";
      const pending = Boolean(entry?.tools.has(button.dataset.tool));
      paintButton(button, disk, pending, pending ? entry.tools.get(button.dataset.tool) : disk, button.dataset.tool);
    }
    tr.classList.toggle("row-staged", Boolean(entry));
  }
  renderChanges();
}

// The preservation rule: removing the last shared file that declares a server kirocrew keeps copies its
// spec into the crew store first, so kirocrew sessions do not lose it.
function preserved(tr) {
  const shared = [...tr.querySelectorAll("button[data-scope]")].filter((b) => b.dataset.scope !== CREW);
  const onDisk = shared.some((b) => b.dataset.on === "true");
  const after = shared.some((b) => effective(tr, b.dataset.scope));
  return onDisk && !after && effective(tr, CREW) !== false && tr.dataset.inStore !== "true";
}

function renderChanges() {
  const list = $("changes-list");
  const bar = $("changes");
  if (!list || !bar) return;
  list.replaceChildren();
  for (const [name, entry] of staged) {
    const tr = rowOf(name);
    const parts = [];
    for (const [scope, on] of entry.scopes) {
      const button = [...tr.querySelectorAll("button[data-scope]")].find((b) => b.dataset.scope === scope);
      parts.push(scope === CREW ? `${on ? "load it in" : "keep it out of"} kirocrew sessions`
        : `${on ? "add it to" : "remove it from"} ${button.dataset.label}`);
    }
    for (const [tool, on] of entry.tools) parts.push(`turn tool ${tool} ${on ? "on" : "off"}`);
    const item = document.createElement("li");
    const code = document.createElement("code");
    code.textContent = name;
    item.append(code, `: ${parts.join("; ")}.`);
    if (preserved(tr)) {
      const note = document.createElement("p");
      note.className = "hint preserve";
      note.textContent = `No other file will declare ${name}, and kirocrew keeps it: Apply first copies its spec into `
        + `${crewPath()} (the preservation rule), so kirocrew sessions still load it.`;
      item.append(note);
    }
    list.append(item);
  }
  const count = staged.size;
  bar.hidden = count === 0;
  $("changes-heading").textContent = `${count} staged change${count === 1 ? "" : "s"}`;
}

function changeList() {
  return [...staged].map(([name, entry]) => {
    const change = { name };
    for (const [scope, on] of entry.scopes) change[scope] = on;
    if (entry.tools.size) change.toolOverrides = Object.fromEntries(entry.tools);
    return change;
  });
}

// Re-read this page and swap the server list in (the changes bar, problems and table), keeping which
// tool lists are open and where the keyboard focus was.
async function refresh() {
  const focused = document.activeElement?.closest?.("#servers-live") ? focusKey(document.activeElement) : null;
  const open = new Set(rows().filter((tr) => tr.querySelector("details[open]")).map((tr) => tr.dataset.name));
  const fresh = (await fetchPage()).getElementById("servers-live");
  $("servers-live").replaceWith(document.adoptNode(fresh));
  for (const tr of rows()) if (open.has(tr.dataset.name)) tr.querySelector("details")?.setAttribute("open", "");
  paint();
  if (focused) restoreFocus(focused);
  schedulePoll();
}

function focusKey(element) {
  const button = element.closest("button");
  if (!button) return { id: element.id };
  if (button.id) return { id: button.id };
  return { name: button.closest("tr")?.dataset.name, scope: button.dataset.scope, tool: button.dataset.tool,
    action: button.dataset.action };
}

function restoreFocus(key) {
  let target = key.id ? $(key.id) : null;
  if (!target && key.name !== undefined) {
    const tr = rowOf(key.name);
    target = tr && [...tr.querySelectorAll("button")].find((b) => b.dataset.scope === key.scope
      && b.dataset.tool === key.tool && b.dataset.action === key.action);
  }
  (target || $("servers-region"))?.focus();
}

function schedulePoll() {
  window.clearTimeout(pollTimer);
  if ($("servers-region")?.dataset.probing === "true") {
    pollTimer = window.setTimeout(async () => {
      if (busy) return schedulePoll();
      try { await refresh(); } catch { schedulePoll(); }
    }, POLL_MS);
  }
}

function showRowResult(name, text, tone) {
  const target = rowOf(name)?.querySelector(".row-result");
  if (!target) return;
  target.textContent = text;
  target.className = `row-result ${tone}`;
  target.hidden = false;
}

function actionWords(result) {
  return Object.entries(result.actions || {}).map(([where, what]) => `${where} ${what}`).join(", ");
}

// Per-change results at their rows; a summary announced (as an alert when something was refused).
function report(outcome, what) {
  const refused = outcome.results.filter((r) => !r.ok);
  for (const result of outcome.results) {
    if (!result.ok) showRowResult(result.name, `Refused (${result.code}): ${result.error}`, "fail");
    else if (result.actions?.[CREW] === "preserved") {
      showRowResult(result.name, `Kept for kirocrew: its spec was copied into ${crewPath()} (the preservation rule).`, "ok");
    } else if (result.tools_rejected?.length) {
      showRowResult(result.name, `Tool names refused: ${result.tools_rejected.join(", ")}`, "fail");
    }
  }
  let message = `${what}: ${outcome.applied} of ${outcome.results.length} change${outcome.results.length === 1 ? "" : "s"} applied`;
  if (refused.length) message += `; refused: ${refused.map((r) => `${r.name} (${r.code})`).join(", ")}`;
  if (outcome.rebuild && outcome.rebuild.ok === false) {
    message += `; the agent file was not rendered (${outcome.rebuild.code}): ${outcome.rebuild.error}`;
  }
  announce(message, { urgent: refused.length > 0 || outcome.rebuild?.ok === false });
  return message;
}

async function withBusy(buttons, busyText, work) {
  busy = true;
  const saved = buttons.map((b) => [b, b.textContent]);
  for (const b of buttons) b.disabled = true;
  if (busyText && buttons[0]) buttons[0].textContent = busyText;
  $("servers-region")?.setAttribute("aria-busy", "true");
  try {
    return await work();
  } finally {
    busy = false;
    for (const [b, text] of saved) {
      if (b.isConnected) { b.disabled = false; if (busyText) b.textContent = text; }
    }
    $("servers-region")?.removeAttribute("aria-busy");
  }
}

async function applyStaged(what) {
  const changes = changeList();
  if (!changes.length) return null;
  const outcome = await api("/api/mcp/apply", { method: "POST", body: { changes } });
  staged.clear();
  await refresh();
  report(outcome, what);
  return outcome;
}

async function onApply() {
  await withBusy([$("apply"), $("discard")], "Applying…", async () => {
    try {
      await applyStaged("Applied");
    } catch (err) {
      announce(`Not applied: ${err.message}${err.code ? ` (${err.code})` : ""}`, { urgent: true });
    }
  });
}

function onDiscard() {
  const count = staged.size;
  staged.clear();
  paint();
  announce(`Discarded ${count} staged change${count === 1 ? "" : "s"}; nothing was written`);
  $("servers-region")?.focus();
}

async function onProbe(button) {
  const name = button.closest("tr")?.dataset.name;
  const body = name === undefined ? { all: true } : { name };
  await withBusy([button], "Probing…", async () => {
    try {
      const answer = await api("/api/mcp/probe", { method: "POST", body });
      await refresh();
      const summary = answer.servers.map((s) => {
        const badge = rowOf(s.name)?.querySelector("td[data-label=Status] .badge");
        return `${s.name}: ${badge ? badge.textContent : s.status}`;
      }).join("; ");
      announce(`Probed ${summary || "no servers"}`);
    } catch (err) {
      announce(`Probe failed: ${err.message}`, { urgent: true });
      try { await refresh(); } catch { /* the announcement already says it failed */ }
    }
  });
}

// -- uninstall, after a confirmation ---------------------------------------------------------------
let uninstalling = null;

function onUninstall(button) {
  uninstalling = button.closest("tr").dataset.name;
  $("uninstall-name").textContent = uninstalling;
  $("uninstall-dialog").showModal();
  $("uninstall-cancel").focus();
}

async function onUninstallConfirmed() {
  const name = uninstalling;
  $("uninstall-dialog").close();
  await withBusy([], "", async () => {
    try {
      const outcome = await api("/api/mcp/apply", { method: "POST", body: { changes: [{ name, uninstall: true }] } });
      staged.delete(name);
      await refresh();
      report(outcome, `Uninstalled ${name}`);
    } catch (err) {
      announce(`Not uninstalled: ${err.message}`, { urgent: true });
    }
  });
  $("servers-region")?.focus();
}

// -- kirocrew's own servers left in a shared file ------------------------------------------------
async function onRemoveStale(button) {
  await withBusy([button], "Removing…", async () => {
    try {
      const out = await api("/api/mcp/cleanup", { method: "POST", body: {} });
      const removed = out.scopes.filter((s) => s.state === "cleaned")
        .map((s) => `${s.removed.join(", ")} from ${s.path}`);
      await refresh();
      announce(removed.length ? `Removed ${removed.join("; ")}` : "Nothing to remove: no shared file holds kirocrew's servers");
    } catch (err) {
      announce(`Not removed: ${err.message}${err.code ? ` (${err.code})` : ""}`, { urgent: true });
      try { await refresh(); } catch { /* the announcement already says it failed */ }
    }
  });
  $("servers-region")?.focus();
}

// -- Apply & Restart --------------------------------------------------------------------------------
async function onRestart(button) {
  const result = $("restart-result");
  await withBusy([button], "Restarting…", async () => {
    let message;
    let urgent = false;
    try {
      const outcome = await applyStaged("Applied before the restart");
      // A refused change stops here, so the owner can see it; a failed render does not (the restart renders again).
      if (outcome && outcome.results.some((r) => !r.ok)) {
        message = "Not restarted: a staged change was refused (see its row); nothing was restarted";
        urgent = true;
      } else {
        const out = await api("/api/sessions/restart", { method: "POST", body: { reason: "mcp_apply" } });
        message = `Restarted: ${out.restarted} kiro-cli session${out.restarted === 1 ? "" : "s"} closed or replaced`
          + " (idle ones now, busy ones when their run ends); new sessions load the current MCP servers";
        if (!out.mcpSyncOk) {
          message = `Sessions restarted (${out.restarted}), but rendering the MCP servers failed`
            + ` (${out.mcpSyncError?.code}): ${out.mcpSyncError?.error}. Check the gateway log.`;
          urgent = true;
        }
      }
    } catch (err) {
      message = `Restart failed: ${err.message}${err.code ? ` (${err.code})` : ""}`;
      urgent = true;
    }
    result.textContent = message;
    result.className = `result ${urgent ? "fail" : "ok"}`;
    result.hidden = false;
    announce(message, { urgent });
  });
}

// -- add a custom server ----------------------------------------------------------------------------
const NAME_RE = /^[@A-Za-z0-9][@A-Za-z0-9/_.:-]*$/;
const ENV_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const HEADER_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const lines = (id) => $(id).value.split("\n").map((l) => l.trim()).filter((l) => l !== "");
// The inputs of a field of the add form (the scope checkboxes are one field) and where its message goes.
const fieldInputs = (field) => (field === "scopes" ? [...document.querySelectorAll("#add-scopes input")] : [$(`add-${field}`)]);

function fieldError(field, message, options) {
  showFieldError(fieldInputs(field), message, { error: $(`add-${field}-error`), ...options });
}

function pairs(id, separator, keyRe, what) {
  const out = {};
  for (const line of lines(id)) {
    const at = line.indexOf(separator);
    const key = at > 0 ? line.slice(0, at).trim() : "";
    if (!keyRe.test(key)) return { error: `"${line.slice(0, 40)}" is not ${what}` };
    out[key] = line.slice(at + 1).trim();
  }
  return { value: out };
}

// The request, or the first field error (checked here first; the API checks everything again).
function readForm() {
  const errors = [];
  const name = $("add-name").value.trim();
  if (!name) errors.push(["name", "Give the server a name."]);
  else if (name.length > 128 || name.includes("..") || !NAME_RE.test(name)) {
    errors.push(["name", "Use letters, digits and @ / _ . : - only, starting with a letter, digit or @ (no \"..\")."]);
  }
  const body = { name, scopes: [...document.querySelectorAll("#add-scopes input:checked")].map((i) => i.value) };
  if ($("add-http").checked) {
    const url = $("add-url").value.trim();
    let parsed = null;
    try { parsed = new URL(url); } catch { /* reported below */ }
    if (!url) errors.push(["url", "Give the server's URL."]);
    else if (!parsed || !["https:", "http:"].includes(parsed.protocol)) errors.push(["url", "The URL must start with https://."]);
    body.url = url;
    const headers = pairs("add-headers", ":", HEADER_RE, "a \"Name: value\" header line");
    if (headers.error) errors.push(["headers", headers.error]);
    else if (Object.keys(headers.value).length) body.headers = headers.value;
  } else {
    const command = $("add-command").value.trim();
    if (!command) errors.push(["command", "Give the command that starts the server."]);
    body.command = command;
    body.args = $("add-args").value.split("\n").map((l) => l.trim()).filter((l) => l !== "");
    const env = pairs("add-env", "=", ENV_RE, "a NAME=value line");
    if (env.error) errors.push(["env", env.error]);
    else if (Object.keys(env.value).length) body.env = env.value;
  }
  if (!body.scopes.length) errors.push(["scopes", "Choose at least one: who should see this server."]);
  return { body, errors };
}

async function onAdd(event) {
  event.preventDefault();
  clearFieldErrors($("add-form"));
  const { body, errors } = readForm();
  if (errors.length) {
    errors.forEach(([field, message], at) => fieldError(field, message, { focus: at === 0, alert: null }));
    announce(`Not added: ${errors.map(([, m]) => m).join(" ")}`, { urgent: true });
    return;
  }
  const submit = $("add-form").querySelector("button[type=submit]");
  await withBusy([submit], "Adding…", async () => {
    try {
      const outcome = await api("/api/mcp/servers", { method: "POST", body });
      $("add-form").reset();
      showTransport();
      await refresh();
      report(outcome, `Added ${outcome.name}`);
      showRowResult(outcome.name, "Added.", "ok");
    } catch (err) {
      // The API names the field it refused (err.field); a refusal without one is only announced.
      if (err.field && $(`add-${err.field}-error`)) fieldError(err.field, err.message, { alert: `Not added: ${err.message}` });
      else announce(`Not added: ${err.message}`, { urgent: true });
    }
  });
}

function showTransport() {
  const http = $("add-http").checked;
  $("http-fields").hidden = !http;
  $("stdio-fields").hidden = http;
}

// -- wiring: delegated, so the list can be swapped without re-binding ------------------------------
document.addEventListener("click", (event) => {
  const button = event.target.closest("button");
  if (!button || button.disabled) return;
  if (button.dataset.scope) stage("scopes", button);
  else if (button.dataset.tool) stage("tools", button);
  else if (button.dataset.action === "probe" || button.id === "probe-all") onProbe(button);
  else if (button.dataset.action === "uninstall") onUninstall(button);
  else if (button.id === "apply") onApply();
  else if (button.id === "discard") onDiscard();
  else if (button.id === "restart") onRestart(button);
  else if (button.id === "remove-stale") onRemoveStale(button);
  else if (button.id === "uninstall-confirm") onUninstallConfirmed();
  else if (button.id === "uninstall-cancel") $("uninstall-dialog").close();
});
$("add-form").addEventListener("submit", onAdd);
$("add-stdio").addEventListener("change", showTransport);
$("add-http").addEventListener("change", showTransport);
showTransport();
paint();
schedulePoll();
