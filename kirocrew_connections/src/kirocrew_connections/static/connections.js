// The Connections page: Connect, Cancel, Test and Disconnect per card, the 2 s mint poll and the 30 s status poll.
// Cards are rendered on the server; to refresh one, this module fetches the page again and swaps that card's
// HTML, so what a state looks like is decided in one place (the template), never re-built here.
import { api, announce, clearFieldErrors, fetchPage, showFieldError } from "/static/core/shell.js";

const root = document.getElementById("connections");
const grid = document.getElementById("connections-grid");
const search = document.getElementById("connections-search");
const count = document.getElementById("connections-count");
const empty = document.getElementById("connections-empty");
const showGated = document.getElementById("show-gated");
const STATUS_POLL_MS = Number(root.dataset.statusPollMs) || 30000;
const MINT_POLL_MS = Number(root.dataset.mintPollMs) || 2000;
const PENDING_KEY = "kirocrew.connections.pending";

const busy = new Set();          // slugs with an action in flight (their card is not swapped by the poll)
const mintPolls = new Map();     // slug -> interval id
const mintReads = new Set();     // slugs whose mint read is in flight (a slow answer never overlaps the next tick)
const approvalTabs = new Map();  // slug -> {win, navigated}: the tab opened on this click
let testing = null;              // the slug whose Test runs (one at a time)

const MINT_FAILURES = {
  mint_timeouterror: "Authorization setup timed out before an approval address was ready. Try connecting again.",
  mint_process_gone: "The authorization process stopped before approval finished. Try connecting again.",
  mint_server_absent: "The MCP server entry disappeared before authorization could start. Try connecting again.",
  mint_url_rejected: "The provider returned an approval address containing credential-like data, so it was not displayed.",
  mint_approval_host_refused: "The provider's server sent an approval page that is not on the provider's own sign-in host, so it was not opened.",
  mint_consent_failed: "The authorization did not complete: it was denied, or the provider refused the OAuth app (check its client id and secret). Try connecting again.",
  mint_redirect_port_busy: "Another program is using this provider's callback port, so the approval could not be received. Close it and try connecting again.",
  mint_dead_grant_kept: "The provider refuses the stored authorization, and it could not be removed here. Disconnect, then connect again.",
  mint_grant_unproven: "The stored authorization could not be confirmed: the provider accepts it but exposes no tools. Disconnect, then connect again to authorize afresh.",
};
const MINT_FAILED = "Authorization setup failed before an approval address was ready. Try connecting again.";

// -- the local wait (per tab, survives a reload: sessionStorage) --------------------------------------

function pendingAll() {
  try { return JSON.parse(sessionStorage.getItem(PENDING_KEY) || "{}") || {}; } catch { return {}; }
}
function pendingFor(slug) { return pendingAll()[slug] || null; }
function setPending(slug, value) {
  const all = pendingAll();
  if (value) all[slug] = value; else delete all[slug];
  sessionStorage.setItem(PENDING_KEY, JSON.stringify(all));
}

// -- cards ----------------------------------------------------------------------------------------------

const cardOf = (slug) => document.getElementById(`connection-${slug}`);
const nameOf = (slug) => cardOf(slug)?.dataset.name || slug;

function swapCard(fresh, { force = false } = {}) {
  const old = cardOf(fresh.dataset.slug);
  if (!old) return;
  if (!force && (busy.has(fresh.dataset.slug) ||
      (old.dataset.state === fresh.dataset.state && old.dataset.since === fresh.dataset.since))) return;
  const feedback = old.querySelector("[data-feedback]");
  fresh.querySelector("[data-feedback]").replaceWith(feedback);
  const hadFocus = old.contains(document.activeElement);
  if (old.hidden) fresh.hidden = true;
  old.replaceWith(fresh);
  decorate(fresh);
  if (hadFocus) (fresh.querySelector("button, a") || fresh).focus?.();
}

async function refreshCards(slugs = null) {
  const page = await fetchPage();
  for (const fresh of page.querySelectorAll("article.connection-card")) {
    if (slugs === null) swapCard(fresh);
    else if (slugs.includes(fresh.dataset.slug)) swapCard(fresh, { force: true });
  }
  applyFilter();
  for (const card of grid.querySelectorAll("article.connection-card[data-state='waiting-for-approval']")) {
    startMintPoll(card.dataset.slug);
  }
}

function decorate(card) {
  // The waiting heading says where to finish only when this click opened the tab.
  const heading = card.querySelector("[data-heading]");
  const tab = approvalTabs.get(card.dataset.slug);
  if (heading && tab && !tab.win.closed) heading.textContent = "Finish approving in your browser…";
  if (testing && testing !== card.dataset.slug) lockTest(card, testing);
}

function setBusy(slug, on, label) {
  const card = cardOf(slug);
  if (on) busy.add(slug); else busy.delete(slug);
  if (!card) return;
  card.setAttribute("aria-busy", on ? "true" : "false");
  for (const button of card.querySelectorAll("button[data-action]")) {
    button.disabled = on;
    if (on && label && button.dataset.action === label.action) {
      button.dataset.idle = button.textContent;
      button.textContent = label.text;
    } else if (!on && button.dataset.idle) {
      button.textContent = button.dataset.idle;
      delete button.dataset.idle;
    }
  }
}

// -- feedback (per card; role=status for success, role=alert for warnings and errors) ------------------

function feedback(slug, { kind, text, revoke = false } = {}) {
  const slot = cardOf(slug)?.querySelector("[data-feedback]");
  if (!slot) return;
  slot.replaceChildren();
  if (!text) return;
  const message = document.createElement("p");
  message.className = `message ${kind}`;
  message.setAttribute("role", kind === "success" ? "status" : "alert");
  message.textContent = text;
  slot.append(message);
  // A role=status element inserted with its text is not read by every screen reader; the shell's region is.
  if (kind === "success") announce(`${nameOf(slug)}: ${text}`);
  if (revoke) {
    const link = document.createElement("a");
    link.href = cardOf(slug).dataset.revoke;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    link.textContent = `Revoke at ${nameOf(slug)}`;
    const line = document.createElement("p");
    line.append(link);
    slot.append(line);
  }
}

const failure = (err) => `Action failed: ${err instanceof Error ? err.message : String(err || "Unknown error")}`;

// -- Connect, Reconnect ------------------------------------------------------------------------------

function openApprovalTab(slug) {
  // Opened synchronously in the click, or the browser treats it as a popup nobody asked for.
  const win = window.open("", "_blank");
  if (!win) return;
  try {
    win.document.title = "Connecting…";
    win.document.body.textContent = "Connecting…";
  } catch { /* a browser that isolates the blank tab: it still navigates below */ }
  win.opener = null;
  approvalTabs.set(slug, { win, navigated: false });
}

function closeApprovalTab(slug) {
  const tab = approvalTabs.get(slug);
  approvalTabs.delete(slug);
  if (tab && !tab.navigated && !tab.win.closed) tab.win.close();
}

async function connect(slug) {
  openApprovalTab(slug);
  feedback(slug);
  const reconnect = cardOf(slug).dataset.state !== "not-connected";
  setBusy(slug, true, { action: "connect", text: reconnect ? "Reconnecting…" : "Connecting…" });
  try {
    const installed = await api("/api/connections/install", { method: "POST", body: { slug } });
    const minted = await api("/api/connections/mint", { method: "POST", body: { slug } });
    setPending(slug, { kind: installed.created ? "new" : "reconnect", token: minted.token });
    setBusy(slug, false);
    await refreshCards([slug]);
    startMintPoll(slug);
    announce(`${nameOf(slug)}: waiting for approval`);
  } catch (err) {
    setBusy(slug, false);
    closeApprovalTab(slug);
    feedback(slug, { kind: "error", text: failure(err) });
  }
}

function startMintPoll(slug) {
  if (mintPolls.has(slug)) return;
  mintPolls.set(slug, window.setInterval(() => pollMint(slug), MINT_POLL_MS));
  pollMint(slug);
}

function stopMintPoll(slug) {
  window.clearInterval(mintPolls.get(slug));
  mintPolls.delete(slug);
}

async function pollMint(slug) {
  if (mintReads.has(slug)) return;
  mintReads.add(slug);
  try {
    await readMint(slug);
  } finally {
    mintReads.delete(slug);
  }
}

async function readMint(slug) {
  let view;
  try {
    view = await api(`/api/connections/mint?slug=${encodeURIComponent(slug)}`);
  } catch {
    return; // one failed read is swallowed; the next tick asks again
  }
  const pending = pendingFor(slug);
  if (pending && view.token && view.token !== pending.token && view.state !== "idle") {
    setPending(slug, null); // a sibling tab's attempt: ours is over, and nothing else is claimed
  }
  const ours = !pending || !view.token || view.token === pending.token;
  if (view.state === "waiting" && view.oauth_url) {
    const tab = approvalTabs.get(slug);
    if (ours && tab && !tab.navigated && !tab.win.closed && /^https?:/i.test(view.oauth_url)) {
      tab.win.location.href = view.oauth_url;
      tab.navigated = true;
    }
    const card = cardOf(slug);
    if (card && !card.querySelector("[data-approval]") && !busy.has(slug)) await refreshCards([slug]);
    return;
  }
  if (view.state === "minting") return;
  stopMintPoll(slug);
  closeApprovalTab(slug);
  if (ours) setPending(slug, null);
  if (view.state === "granted") {
    try { await api("/api/mcp/probe", { method: "POST", body: { name: slug } }); } catch { /* the badge still folds the grant */ }
    announce(`${nameOf(slug)} is connected`);
  }
  await refreshCards([slug]);
  if (ours && view.state === "failed") {
    feedback(slug, { kind: "error", text: `Action failed: ${MINT_FAILURES[view.reason] || MINT_FAILED}` });
  } else if (ours && view.state === "expired" && view.reason) {
    feedback(slug, { kind: "warning", text: "The approval was not finished in time. Connect again to retry." });
  }
}

// -- Cancel: the card decides whether to uninstall what a NEW connect installed (§2.9) ---------------

async function cancel(slug) {
  const pending = pendingFor(slug);
  setPending(slug, null);
  stopMintPoll(slug);
  closeApprovalTab(slug);
  setBusy(slug, true, { action: "cancel", text: "Cancelling…" });
  // Not awaited: disposing the mint process can take seconds, and the withdrawal is already done here.
  api("/api/connections/cancel", { method: "POST", body: { slug, token: pending?.token ?? null } })
    .catch(() => {}).finally(() => refreshCards([slug]).catch(() => {}));
  try {
    if (pending?.kind === "new") {
      await api("/api/mcp/apply", { method: "POST", body: { changes: [{ name: slug, uninstall: true }] } });
    }
    announce(`${nameOf(slug)}: connect cancelled`);
  } catch (err) {
    feedback(slug, { kind: "error", text: failure(err) });
  } finally {
    setBusy(slug, false);
    await refreshCards([slug]).catch(() => {});
  }
}

// -- Test (one at a time across the page) -----------------------------------------------------------

function lockTest(card, running) {
  const button = card.querySelector("button[data-action='test']");
  if (!button) return;
  const why = `One connection test runs at a time — ${nameOf(running)} is testing`;
  button.disabled = true;
  button.title = why;
  button.setAttribute("aria-label", why);
}

function unlockTests() {
  for (const button of grid.querySelectorAll("button[data-action='test']")) {
    if (busy.has(button.closest("article").dataset.slug)) continue;
    button.disabled = false;
    button.removeAttribute("title");
    button.removeAttribute("aria-label");
  }
}

async function test(slug) {
  feedback(slug);
  testing = slug;
  setBusy(slug, true, { action: "test", text: "Testing…" });
  for (const card of grid.querySelectorAll("article.connection-card")) {
    if (card.dataset.slug !== slug) lockTest(card, slug);
  }
  let refused = false;
  try {
    const result = await api("/api/connections/test", { method: "POST", body: { slug } });
    if (result.verdict === "usable") {
      feedback(slug, { kind: "success", text: `Connection is healthy (${result.toolCount} tools).` });
    } else if (result.verdict === "no_tools") {
      feedback(slug, { kind: "warning", text: "Offered no tools to inspect." });
    } else if (result.code === "grant_refused") {
      // kiro-cli dropped the refused grant: the card now offers Reconnect, and says why.
      feedback(slug, {
        kind: "error",
        text: `${nameOf(slug)} refused the stored authorization (revoked at ${nameOf(slug)}, or expired). Reconnect to approve access again.`,
      });
      refused = true;
    } else {
      feedback(slug, { kind: "error", text: "Action failed: The provider did not pass the connection test." });
    }
  } catch (err) {
    feedback(slug, { kind: "error", text: failure(err) });  // test_in_flight names the running provider
  } finally {
    testing = null;
    setBusy(slug, false);
    unlockTests();
  }
  // The card's own state changed (Needs attention, with Reconnect); the message above is carried over.
  if (refused) await refreshCards([slug]).catch(() => {});
}

// -- Disconnect: two clauses, and every outcome carries the revoke link (§2.11) -----------------------

export function disconnectMessage(r) {
  const surviving = (r.grantSurviving || []).length > 0;
  const shared = r.grantSharedWith || [];
  const unreadable = r.grantCensusUnreadable || [];
  let grant = null;
  if (surviving) grant = "Part of the stored grant could not be removed. Revoke access at the provider.";
  else if (shared.length) grant = `The stored grant was kept because the same endpoint is also configured by: ${shared.join(", ")}. Revoking at the provider would cut off their access too.`;
  else if (r.grantCensusIncomplete && unreadable.length) grant = `The stored grant was kept because ${unreadable[0]} could not be read to rule out another server using it. Fix or remove that file and disconnect again.`;
  else if (r.grantCensusIncomplete) grant = "The stored grant was kept because a configuration source could not be read to rule out another server using it. Check your server configuration and disconnect again.";
  else if (r.grantRemoved && !r.entryRemoved) grant = "The stored grant was removed.";
  else if (!r.entryRemoved && !r.grantRemoved) grant = null;
  else grant = "Disconnected locally. Revoke access at the provider to cancel the grant completely.";
  const entry = !r.entryRemoved && (surviving || shared.length || !r.grantRemoved)
    ? "Your server configuration was left unchanged. You can manage this entry from the MCP servers page." : null;
  const kind = surviving ? "error"
    : (r.grantCensusIncomplete || shared.length || (!r.entryRemoved && !r.grantRemoved)) ? "warning" : "success";
  return { kind, text: [grant, entry].filter(Boolean).join(" ") || "Nothing to disconnect here." };
}

async function disconnect(slug) {
  feedback(slug);
  setPending(slug, null);
  setBusy(slug, true, { action: "disconnect", text: "Disconnecting…" });
  let message;
  try {
    message = disconnectMessage(await api("/api/connections/disconnect", { method: "POST", body: { slug } }));
  } catch (err) {
    message = { kind: "error", text: failure(err) };
  } finally {
    setBusy(slug, false);
  }
  await refreshCards([slug]).catch(() => {});
  feedback(slug, { ...message, revoke: true });
  if (message.kind === "success") announce(`${nameOf(slug)} disconnected`);
}

// -- the return address of a browser on another computer (§2.8) -------------------------------------

const RETURN_ADDRESS_HELP = "Paste the full http://127.0.0.1:PORT/?code=… address from your browser.";

export function validReturnAddress(raw) {
  const text = raw.trim();
  let url;
  try { url = new URL(text.includes("://") ? text : `http://${text}`); } catch { return false; }
  const loopback = ["127.0.0.1", "[::1]", "localhost"].includes(url.hostname);
  const codes = url.searchParams.getAll("code");
  return url.protocol === "http:" && loopback && url.port !== "" && !url.username && !url.password &&
    !url.hash && codes.length === 1 && codes[0] !== "";
}

// The return address's error sits at its field (the shell's helpers); the card's own feedback is not used.
const fieldError = (input, message) => showFieldError(input, message, { alert: null });

async function relay(form) {
  const slug = form.closest("article.connection-card").dataset.slug;
  const input = form.elements.redirect_url;
  const button = form.querySelector("button[type=submit]");
  if (!validReturnAddress(input.value)) {
    fieldError(input, RETURN_ADDRESS_HELP);
    return;
  }
  clearFieldErrors(form);
  button.disabled = true;
  button.textContent = "Sending…";
  try {
    await api("/api/connections/relay", {
      method: "POST", body: { slug, redirect_url: input.value.trim(), token: pendingFor(slug)?.token ?? null },
    });
    input.value = "";
    feedback(slug, { kind: "success", text: "Return address delivered. Checking the connection…" });
    startMintPoll(slug);
  } catch (err) {
    fieldError(input, failure(err));
  } finally {
    button.disabled = false;
    button.textContent = "Complete";
  }
}

grid.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-relay]");
  if (!form) return;
  event.preventDefault();
  relay(form);
});
grid.addEventListener("input", (event) => {
  if (event.target.name === "redirect_url") clearFieldErrors(event.target.form);
});

// -- search, the gated switch, the 30 s status poll -------------------------------------------------

function applyFilter() {
  const words = search.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
  let shown = 0;
  for (const card of grid.querySelectorAll("article.connection-card")) {
    const gated = card.hasAttribute("data-gated");
    const visible = (!gated || showGated?.checked) && words.every((w) => card.dataset.search.includes(w));
    card.hidden = !visible;
    if (visible && !gated) shown += 1;
  }
  count.textContent = `${shown} available`;
  empty.hidden = grid.querySelector("article.connection-card:not([hidden])") !== null;
}

const actions = { connect, cancel, test, disconnect };
grid.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (!button || button.disabled) return;
  const slug = button.closest("article.connection-card").dataset.slug;
  actions[button.dataset.action]?.(slug);
});
search.addEventListener("input", applyFilter);
showGated?.addEventListener("change", applyFilter);

window.setInterval(() => {
  if (document.visibilityState === "visible") refreshCards().catch(() => {});
}, STATUS_POLL_MS);

for (const card of grid.querySelectorAll("article.connection-card")) {
  if (card.dataset.state === "waiting-for-approval" || pendingFor(card.dataset.slug)) startMintPoll(card.dataset.slug);
}
applyFilter();

// Once per mount: warm every card's approval address on one shared kiro-cli, so a Connect click adopts it at
// once instead of starting its own. Best-effort: a failure only means Connect takes the slower cold path.
api("/api/connections/premint", { method: "POST", body: {} }).catch(() => {});
