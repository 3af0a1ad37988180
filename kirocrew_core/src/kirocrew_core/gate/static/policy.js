// The Policy page. Every change goes through the owner-authenticated /api/policy routes (the twins of
// `kirocrew policy`); then #policy-state (banner, rules, file) is swapped for this page's fresh
// server-rendered HTML. A refusal is shown at the form field its `field` names. The "Would this be
// allowed?" answer fills the page's own <template>s with text, never with HTML.
import { api, announce, clearFieldErrors, fetchPage, showFieldError } from "/static/core/shell.js";

const INPUT_LISTS = ["command", "path", "domain"];
const STATUS = { allow: "ok", ask: "warn", deny: "fail" };

function ready(root) {
  for (const button of root.querySelectorAll("button[data-ready]")) button.disabled = false;
}

// The regions named by id swapped for their fresh copies from the server.
async function redraw(...ids) {
  const page = await fetchPage();
  for (const id of ids) {
    const current = document.getElementById(id);
    const fresh = page.getElementById(id);
    if (!current || !fresh) continue;
    current.replaceWith(fresh);
    ready(fresh);
  }
}

// -- removing a rule (asks first) ------------------------------------------------------------------------

async function onRemove(event) {
  const button = event.target.closest("button[data-do='remove']");
  if (!button) return;
  const row = button.closest("tr[data-id]");
  const { id, description } = row.dataset;
  if (!window.confirm(`Remove your rule ${id} (${description})?`)) return;
  button.disabled = true;
  try {
    await api(`/api/policy/rules/${encodeURIComponent(id)}`, { method: "DELETE" });
    announce(`Removed rule ${id}.`);
    await redraw("policy-state");
    document.getElementById("rules-heading")?.focus(); // the button is gone: keep the keyboard in the list
  } catch (err) {
    button.disabled = false;
    announce(`Could not remove ${id}: ${err.message} (${err.code})`, { urgent: true });
  }
}

// -- forms ------------------------------------------------------------------------------------------------

function showRefusal(form, prefix, err, verb) {
  const text = `${err.message} (${err.code})`;
  const input = err.field ? form.elements.namedItem(err.field) : null;
  const error = err.field ? document.getElementById(`${prefix}-${err.field}-error`) : null;
  if (input && error) {
    showFieldError(input, text, { error, alert: `${verb}: ${text}` });
    return;
  }
  const general = document.getElementById(`${prefix}-form-error`);
  general.textContent = `${verb}: ${text}`;
  general.hidden = false;
  announce(general.textContent, { urgent: true });
}

function resetErrors(form, prefix) {
  clearFieldErrors(form);
  const general = document.getElementById(`${prefix}-form-error`);
  general.hidden = true;
  general.textContent = "";
}

// The add form as the route's fields: only what was filled in; the input lists one item a line.
function ruleOf(form) {
  const value = (name) => form.elements.namedItem(name).value.trim();
  const rule = { decision: value("decision"), tool: value("tool") };
  for (const name of INPUT_LISTS) {
    const items = form.elements.namedItem(name).value.split("\n").map((line) => line.trim()).filter(Boolean);
    if (items.length) rule[name] = items;
  }
  for (const name of ["authority", "agent", "workspace", "reason"]) {
    if (value(name)) rule[name] = value(name);
  }
  return rule;
}

function wireAddForm(form) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    resetErrors(form, "add");
    const submit = form.querySelector('button[type="submit"]');
    submit.disabled = true;
    try {
      const answer = await api("/api/policy/rules", { method: "POST", body: ruleOf(form) });
      announce(`Added rule ${answer.rule.id}: ${answer.rule.description}.`);
      form.reset();
      await redraw("policy-state");
    } catch (err) {
      showRefusal(form, "add", err, "Not added");
    } finally {
      submit.disabled = false;
    }
  });
}

// -- "Would this be allowed?" ---------------------------------------------------------------------------

function fill(root, slot, text) {
  const el = root.querySelector(`[data-slot="${slot}"]`);
  if (el) el.textContent = text;
  return el;
}

function showDecision(el, decision) {
  el.textContent = decision;
  if (STATUS[decision]) el.classList.add(STATUS[decision]);
}

function renderVerdict(verdict) {
  const view = document.getElementById("verdict-template").content.cloneNode(true);
  showDecision(view.querySelector('[data-slot="decision"]'), verdict.decision);
  fill(view, "rule", verdict.rule.id);
  fill(view, "reason", verdict.reason);
  fill(view, "fingerprint", verdict.fingerprint);
  const body = view.querySelector("tbody");
  const part = document.getElementById("part-template");
  for (const p of verdict.parts) {
    const row = part.content.cloneNode(true);
    fill(row, "label", p.label);
    showDecision(row.querySelector('[data-slot="decision"]'), p.decision);
    fill(row, "rule", p.rule);
    fill(row, "note", p.note || "—");
    body.append(row);
  }
  const region = document.getElementById("verdict");
  region.replaceChildren(view);
}

function wireCheckForm(form) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    resetErrors(form, "check");
    const value = (name) => form.elements.namedItem(name).value.trim();
    const raw = value("input");
    let input = {};
    if (raw) {
      try {
        input = JSON.parse(raw);
      } catch (err) {
        showRefusal(form, "check", { message: `the input is not JSON: ${err.message}`, code: "bad_json", field: "input" },
          "Not checked");
        return;
      }
    }
    const body = { tool: value("tool"), input, authority: value("authority"), agent: value("agent") || null };
    if (value("workspace")) body.workspace = value("workspace");
    const submit = form.querySelector('button[type="submit"]');
    submit.disabled = true;
    try {
      const verdict = await api("/api/policy/check", { method: "POST", body });
      renderVerdict(verdict);
      announce(`The policy would ${verdict.decision === "ask" ? "ask you about" : verdict.decision} this call.`);
    } catch (err) {
      document.getElementById("verdict").replaceChildren();
      showRefusal(form, "check", err, "Not checked");
    } finally {
      submit.disabled = false;
    }
  });
}

// -- recent decisions ---------------------------------------------------------------------------------

async function onRefresh(event) {
  if (!event.target.closest("#decisions-refresh")) return;
  try {
    await redraw("decisions");
    announce("Recent decisions refreshed.");
    document.getElementById("decisions-refresh")?.focus();
  } catch (err) {
    announce(`Could not refresh: ${err.message}`, { urgent: true });
  }
}

document.addEventListener("click", (event) => {
  if (event.target.closest("#policy-state")) onRemove(event);
  else if (event.target.closest("#decisions")) onRefresh(event);
});
wireAddForm(document.getElementById("add-form"));
wireCheckForm(document.getElementById("check-form"));
ready(document);
