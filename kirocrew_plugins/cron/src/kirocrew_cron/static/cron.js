// The Cron pages. Every change goes through the owner-authenticated /api/cron routes; then the page's live
// region (#jobs on the list, #job on a job's page) is swapped for this page's fresh server-rendered HTML,
// on each action and every data-refresh seconds. The add and edit forms send the kirocrew-cron tools'
// own arguments (cron_add, cron_update): the server checks them with the tools' schemas and operations,
// and a refusal is shown at the field it names.
import { api, announce, clearFieldErrors, fetchPage, showFieldError } from "/static/core/shell.js";

const SCHEDULES = ["every", "cron_expr", "at_time", "delay", "at"];
const NUMBERS = new Set(["timeout_secs", "timeout", "catch_up_max"]);
const FLAGS = ["persistent_session", "minimal_context", "silent", "strict_schedule"];
const TEXTS = ["name", "timezone", "agent", "model", "authority", "cwd", "catch_up"];

let region = document.getElementById("jobs") || document.getElementById("job");

// -- times: UTC from the server, shown in this browser's zone, next runs with "in 2h" ------------------

function relative(ms) {
  const past = ms < 0;
  let s = Math.round(Math.abs(ms) / 1000);
  let text;
  if (s < 60) text = past ? "just now" : "in <1m";
  else {
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60);
    const span = d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : `${m}m`;
    text = past ? `${span} ago` : `in ${span}`;
  }
  return text;
}

function localTimes(root) {
  const thisYear = new Date().getFullYear();
  const short = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  const long = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
  for (const el of root.querySelectorAll("time[data-local]")) {
    const when = new Date(el.getAttribute("datetime"));
    if (Number.isNaN(when.getTime())) continue;
    el.title = el.getAttribute("datetime");
    const format = when.getFullYear() === thisYear ? short : long;
    el.textContent = format.format(when) + (el.hasAttribute("data-relative") ? ` (${relative(when - Date.now())})` : "");
  }
}

function ready(root) {
  for (const button of root.querySelectorAll("button[data-ready]")) button.disabled = button.hasAttribute("data-off");
  localTimes(root);
}

// -- the live region --------------------------------------------------------------------------------

async function redraw({ force = false } = {}) {
  if (!region) return;
  if (!force && region.contains(document.activeElement) && document.activeElement !== region) return;
  const page = await fetchPage();
  const fresh = page.getElementById(region.id);
  if (!fresh) return;
  region.replaceWith(fresh);
  region = fresh;
  region.addEventListener("click", onAction);
  ready(region);
}

function schedulePoll() {
  const seconds = Number(region?.dataset.refresh || 0);
  if (!seconds) return;
  window.setInterval(() => {
    if (document.visibilityState === "visible") redraw().catch(() => {});
  }, seconds * 1000);
}

const DONE = { pause: "paused", resume: "resumed", trigger: "started", remove: "removed" };

async function onAction(event) {
  const button = event.target.closest("button[data-do]");
  if (!button || !region.contains(button)) return;
  const holder = button.closest("[data-id]");
  const id = holder.dataset.id;
  const name = holder.dataset.name;
  const what = button.dataset.do;
  if (what === "remove" && !window.confirm(`Remove the cron job "${name}" (${id}) and its history?`)) return;
  const path = `/api/cron/jobs/${encodeURIComponent(id)}`;
  button.disabled = true;
  try {
    if (what === "remove") await api(path, { method: "DELETE" });
    else await api(`${path}/${what}`, { method: "POST", body: {} });
    announce(`Job ${name} ${DONE[what]}.`);
    if (what === "remove" && region.id === "job") {
      window.location.assign("/cron");
      return;
    }
    await redraw({ force: true });
  } catch (err) {
    button.disabled = false;
    announce(`Could not ${what === "trigger" ? "run" : what} ${name}: ${err.message} (${err.code})`, { urgent: true });
  }
}

// -- the forms ----------------------------------------------------------------------------------------

function chosen(form, name) {
  return form.querySelector(`input[name="${name}"]:checked`)?.value;
}

function showChoices(form) {
  const payload = chosen(form, "payload");
  for (const el of form.querySelectorAll("[data-payload]")) el.hidden = el.dataset.payload !== payload;
  const schedule = chosen(form, "schedule");
  for (const el of form.querySelectorAll("[data-schedule]")) el.hidden = el.dataset.schedule !== schedule;
}

function localInputValue(seconds) {
  const d = new Date(seconds * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

// The form as the tool's arguments, every field with a value (a number, a boolean, a list of dates).
function argumentsOf(form) {
  const el = (name) => form.elements.namedItem(name);
  const args = {};
  for (const name of TEXTS) {
    const input = el(name);
    if (input && !input.disabled) args[name] = input.value.trim();
  }
  for (const name of NUMBERS) {
    const input = el(name);
    if (input && !input.disabled && input.value.trim() !== "") args[name] = Number(input.value);
  }
  for (const name of FLAGS) {
    const input = el(name);
    if (input && !input.disabled) args[name] = input.checked;
  }
  const dates = el("skip_dates");
  if (dates && !dates.disabled) args.skip_dates = dates.value.split(/[\s,]+/).filter(Boolean);
  const payload = chosen(form, "payload");
  if (payload === "command") args.command = el("command").value.trim();
  else args.message = el("message").value;
  const schedule = chosen(form, "schedule");
  const raw = el(schedule)?.value.trim() ?? "";
  if (schedule === "every") args.every = raw === "" ? NaN : Number(raw) * Number(el("every_unit").value);
  else if (schedule === "delay") args.delay = raw === "" ? NaN : Number(raw);
  else if (schedule === "at") args.at = raw === "" ? NaN : Math.round(new Date(raw).getTime() / 1000);
  else args[schedule] = raw;
  return args;
}

function same(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

// Add: what differs from the form's defaults, and always the name, the payload and the schedule.
// Edit: only what changed (cron_update takes a subset; "" clears a model or an agent).
function requestOf(form, initial) {
  const now = argumentsOf(form);
  const out = {};
  const scheduleChanged = SCHEDULES.some((key) => key in now && !same(now[key], initial[key]));
  for (const [key, value] of Object.entries(now)) {
    if (Number.isNaN(value)) {
      out[key] = null; // the schema refuses it at its field: "every: None is not of type 'integer'"
      continue;
    }
    const always = form.dataset.mode === "add" && ["name", "message", "command", ...SCHEDULES].includes(key);
    if (always || (SCHEDULES.includes(key) ? scheduleChanged : !same(value, initial[key]))) out[key] = value;
  }
  return out;
}

function fieldFor(form, prefix, name) {
  if (name === "schedule" || SCHEDULES.includes(name)) {
    const schedule = chosen(form, "schedule");
    return [document.getElementById(`${prefix}-${schedule}`), document.getElementById(`${prefix}-schedule-error`)];
  }
  if (name === "message" && chosen(form, "payload") === "command") name = "command";
  return [document.getElementById(`${prefix}-${name}`), document.getElementById(`${prefix}-${name}-error`)];
}

function showRefusal(form, prefix, err) {
  const [input, error] = err.field ? fieldFor(form, prefix, err.field) : [null, null];
  const text = `${err.message} (${err.code})`;
  if (input && error) {
    if (input.closest("details")) input.closest("details").open = true;
    showFieldError(input, text, { error, alert: `Not saved: ${text}` });
  } else {
    const general = document.getElementById(`${prefix}-form-error`);
    general.textContent = `Not saved: ${text}`;
    general.hidden = false;
  }
}

function wireForm(form) {
  const prefix = form.id.replace(/-form$/, "");
  const at = form.elements.namedItem("at");
  if (at?.dataset.ts) at.value = localInputValue(Number(at.dataset.ts));
  showChoices(form);
  form.addEventListener("change", (event) => {
    if (event.target.name === "payload" || event.target.name === "schedule") showChoices(form);
  });
  let initial = argumentsOf(form);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    const general = document.getElementById(`${prefix}-form-error`);
    general.hidden = true;
    const submit = form.querySelector('button[type="submit"]');
    submit.disabled = true;
    try {
      const body = requestOf(form, initial);
      if (form.dataset.mode === "add") {
        const answer = await api("/api/cron/jobs", { method: "POST", body });
        announce(`Added job ${answer.job.name} (${answer.job.id}): ${answer.job.schedule_text}.`);
        form.reset();
        showChoices(form);
        initial = argumentsOf(form);
      } else {
        const answer = await api(`/api/cron/jobs/${encodeURIComponent(form.dataset.job)}`, { method: "PATCH", body });
        announce(`Saved job ${answer.job.name}: ${answer.job.schedule_text}.`);
        window.location.reload(); // the title, the facts and the form all show the saved job
        return;
      }
      await redraw({ force: true });
    } catch (err) {
      showRefusal(form, prefix, err);
    } finally {
      submit.disabled = false;
    }
  });
}

if (region) {
  region.addEventListener("click", onAction);
  schedulePoll();
}
for (const form of document.querySelectorAll("form.job-form")) wireForm(form);
ready(document);
