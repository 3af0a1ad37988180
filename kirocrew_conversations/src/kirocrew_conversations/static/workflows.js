// The Workflows page. Buttons work by delegation (onButtons): Cancel posts /api/workflows/runs/<id>/cancel,
// Details draws the run's tree in #run-detail from its events and, while it runs, fetches only the events after
// the last one it drew (?since=SEQ) every POLL_MS; "Rerun from here" posts .../rerun {from_index}; the start forms
// (a saved workflow, a pasted script) post /api/workflows/run. A call waiting for the owner's approval links to
// the conversation where it is answered. The runs table is redrawn from the page's own server-rendered HTML. What a run's
// agents and script wrote (labels, replies, errors, log lines) is untrusted: it only ever becomes textContent.
import { api, announce, clearFieldErrors, onButtons, ready, redrawRegions, showFieldError } from "/static/core/shell.js";

const POLL_MS = 1500;
const EXCERPT_CHARS = 240;
const detail = document.getElementById("run-detail");
const tree = detail.querySelector(".wf-tree");
let shown = null; // {runId, lastSeq, status, phases: Map, calls: Map, timer}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function excerpt(value) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  if (text === undefined) return "";
  return text.length > EXCERPT_CHARS ? `${text.slice(0, EXCERPT_CHARS)}…` : text;
}

function seconds(from, to) {
  const ms = Date.parse(to) - Date.parse(from);
  return Number.isFinite(ms) && ms >= 0 ? `${(ms / 1000).toFixed(1)} s` : "";
}

function phaseList(name) {
  let list = shown.phases.get(name);
  if (!list) {
    const item = element("li", "wf-phase");
    item.append(element("span", "wf-kind", "phase"), " ", element("strong", "wf-label", name));
    list = element("ol");
    item.append(list);
    tree.append(item);
    shown.phases.set(name, list);
  }
  return list;
}

function callNode(data) {
  let call = shown.calls.get(data.index);
  if (!call) {
    const item = element("li", "wf-call");
    item.dataset.index = String(data.index);
    const head = element("p", "wf-head");
    const label = element("span", "wf-label", data.label || `agent call ${data.index}`);
    const status = element("span", "status", "running");
    const took = element("span", "wf-took hint");
    head.append(element("span", "wf-kind", `#${data.index}`), " ", label, " ", status, " ", took);
    const text = element("p", "wf-excerpt");
    text.hidden = true;
    const actions = element("p", "wf-actions");
    const rerun = element("button", "", "Rerun from here");
    rerun.type = "button";
    rerun.dataset.do = "rerun";
    rerun.dataset.index = String(data.index);
    rerun.setAttribute("aria-label", `Rerun ${shown.runId} from agent call ${data.index} (${label.textContent})`);
    actions.append(rerun);
    item.append(head, text, actions);
    (data.phase ? phaseList(data.phase) : tree).append(item);
    call = { item, label, status, took, text, actions, started: null, approval: null };
    shown.calls.set(data.index, call);
  }
  return call;
}

function apply(event) {
  const data = event.data || {};
  switch (event.type) {
    case "phase_started":
      phaseList(String(data.phase));
      break;
    case "agent_started": {
      const call = callNode(data);
      call.started = event.ts;
      if (data.replayed) call.status.textContent = "replaying";
      break;
    }
    case "agent_progress": {
      const call = callNode(data);
      if (data.approval === "settled") {
        call.approval?.remove();
        call.approval = null;
        if (call.status.textContent === "waiting for approval") call.status.textContent = "running";
        call.status.className = "status";
      } else {
        call.status.textContent = `running, ${data.tool_calls} tool calls`;
      }
      break;
    }
    case "approval_requested": {
      // The owner answers on the child conversation's page (and in the feed); the link says where.
      const call = callNode(data);
      call.status.textContent = "waiting for approval";
      call.status.className = "status warn";
      call.approval?.remove();
      call.approval = element("p", "wf-approval");
      const link = element("a", "", `Answer on its conversation${data.tool ? ` (tool ${data.tool})` : ""}`);
      link.href = `/conversations/${encodeURIComponent(data.conversation_id)}`;
      call.approval.append(link);
      call.item.insertBefore(call.approval, call.text);
      break;
    }
    case "agent_finished": {
      const call = callNode(data);
      call.approval?.remove();
      call.approval = null;
      call.status.textContent = data.replayed ? "replayed" : data.ok ? "ok" : "failed";
      call.status.className = `status ${data.ok ? "ok" : "fail"}`;
      if (call.started) call.took.textContent = seconds(call.started, event.ts);
      const said = data.replayed ? "its recorded result" : data.ok ? excerpt(data.text) : excerpt(
        `${data.error}${data.detail ? `: ${data.detail}` : ""}`);
      call.text.textContent = said;
      call.text.hidden = said === "";
      break;
    }
    case "log":
      tree.append(element("li", "wf-log", `log: ${data.message}`));
      break;
    case "budget_update":
      shown.budget = `${data.agent_calls} of ${data.agent_calls_ceiling} agent calls; ${data.wall_secs_left} s of wall time left`;
      break;
    case "run_finished":
      detail.querySelector(".run-end").textContent = `Finished. Result: ${excerpt(data.result)}`;
      break;
    case "run_failed":
      detail.querySelector(".run-end").textContent = `Failed (where: ${data.where}): ${excerpt(data.reason)}`;
      break;
    case "run_cancelled":
      detail.querySelector(".run-end").textContent = "Cancelled.";
      break;
    default:
      break;
  }
}

function drawState(record) {
  detail.querySelector(".run-name").textContent = record.name || "";
  const state = detail.querySelector(".run-state");
  state.textContent = `${record.status}${record.where ? ` (where: ${record.where})` : ""}, started ${record.created_at}`
    + `${record.ended_at ? `, ended ${record.ended_at}` : ""}${record.rerun_of ? `; a rerun of ${record.rerun_of}` : ""}`;
  state.className = `run-state status ${record.status === "failed" ? "fail" : record.status === "finished" ? "ok" : ""}`;
  const ceiling = record.ceilings?.agent_calls;
  detail.querySelector(".run-budget").textContent = shown.budget
    || `${record.agent_calls} of ${ceiling ?? "?"} agent calls; wall time ${record.ceilings?.wall_secs ?? "?"} s`;
  const finished = record.status !== "running";
  for (const call of shown.calls.values()) call.actions.hidden = !finished;
}

async function poll(runId) {
  if (!shown || shown.runId !== runId) return;
  let record;
  try {
    record = await api(`/api/workflows/runs/${encodeURIComponent(runId)}?since=${shown.lastSeq}`);
  } catch (err) {
    if (shown?.runId !== runId) return;
    if (err.status === 404) closeRun(); // an unknown run (a stale address): nothing to show
    announce(`Could not read run ${runId}: ${err.message} (${err.code})`, { urgent: true });
    return;
  }
  if (!shown || shown.runId !== runId) return; // another run was opened meanwhile
  for (const event of record.events) {
    if (event.seq <= shown.lastSeq) continue;
    apply(event);
    shown.lastSeq = event.seq;
  }
  const was = shown.status;
  shown.status = record.status;
  drawState(record);
  if (record.status === "running") {
    shown.timer = window.setTimeout(() => poll(runId), POLL_MS);
  } else if (was === "running") {
    announce(`Workflow run ${runId} ${record.status}.`);
    await redrawRegions(["workflows"]);
  }
}

async function openRun(runId) {
  if (shown?.timer) window.clearTimeout(shown.timer);
  shown = { runId, lastSeq: 0, status: null, phases: new Map(), calls: new Map(), timer: null, budget: "" };
  tree.replaceChildren();
  detail.querySelector(".run-end").textContent = "";
  detail.querySelector(".run-id").textContent = runId;
  detail.querySelector(".run-name").textContent = "";
  detail.hidden = false;
  const url = new URL(window.location.href);
  url.searchParams.set("run", runId);
  window.history.replaceState(null, "", url);
  await poll(runId);
}

function closeRun() {
  if (shown?.timer) window.clearTimeout(shown.timer);
  shown = null;
  detail.hidden = true;
  const url = new URL(window.location.href);
  url.searchParams.delete("run");
  window.history.replaceState(null, "", url);
}

// "key=value" lines (values are strings) or one JSON object; null with a message when neither.
function parseArgs(text) {
  const trimmed = text.trim();
  if (trimmed === "") return { args: {} };
  if (trimmed.startsWith("{")) {
    try {
      const parsed = JSON.parse(trimmed);
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) return { args: parsed };
    } catch {
      return { problem: "The arguments are not valid JSON." };
    }
    return { problem: "The arguments must be a JSON object." };
  }
  const args = {};
  for (const [number, line] of trimmed.split("\n").entries()) {
    if (line.trim() === "") continue;
    const at = line.indexOf("=");
    if (at < 1) return { problem: `Line ${number + 1} is not key=value.` };
    args[line.slice(0, at).trim()] = line.slice(at + 1);
  }
  return { args };
}

// The budget box: empty is the default ceiling; otherwise a whole number (the server checks 1-1000).
function parseBudget(text) {
  const trimmed = text.trim();
  if (trimmed === "") return { budget: null };
  if (!/^[0-9]{1,7}$/.test(trimmed)) return { problem: "The budget must be a whole number of agent calls." };
  return { budget: Number(trimmed) };
}

// Both start forms (a saved workflow's, a pasted script's) post /api/workflows/run with what they hold.
async function start(event) {
  event.preventDefault();
  const form = event.currentTarget;
  clearFieldErrors(form);
  const { args: argsInput, cwd: cwdInput, budget: budgetInput } = form.elements;
  const parsed = parseArgs(argsInput.value);
  if (parsed.problem) {
    showFieldError(argsInput, parsed.problem);
    return;
  }
  const budget = parseBudget(budgetInput.value);
  if (budget.problem) {
    showFieldError(budgetInput, budget.problem);
    return;
  }
  const body = { args: parsed.args };
  if (form.dataset.start === "source") body.source = form.elements.source.value;
  else body.workflow = form.elements.workflow.value;
  if (cwdInput.value.trim() !== "") body.cwd = cwdInput.value.trim();
  if (budget.budget !== null) body.budget = budget.budget;
  const button = form.querySelector("button[type='submit']");
  button.disabled = true;
  try {
    const started = await api("/api/workflows/run", { method: "POST", body });
    announce(`Workflow ${started.name} started as ${started.run_id}.`);
    await redrawRegions(["workflows"]);
    await openRun(started.run_id);
  } catch (err) {
    const field = { args: argsInput, cwd: cwdInput, budget: budgetInput, source: form.elements.source }[err.field];
    const message = `${err.message} (${err.code})`;
    if (field) showFieldError(field, message);
    else showFieldError([], message, { error: form.querySelector("[data-form-error]") });
  } finally {
    button.disabled = false;
  }
}

onButtons({
  async cancel(button) {
    const id = button.closest("[data-id]").dataset.id;
    button.disabled = true;
    try {
      await api(`/api/workflows/runs/${encodeURIComponent(id)}/cancel`, { method: "POST" });
      announce(`Workflow run ${id} cancelled.`);
      await redrawRegions(["workflows"]);
    } catch (err) {
      button.disabled = false;
      announce(`Could not cancel ${id}: ${err.message}`, { urgent: true });
    }
  },
  details(button) {
    openRun(button.closest("[data-id]").dataset.id);
  },
  "close-details"() {
    closeRun();
  },
  async rerun(button) {
    const runId = shown.runId;
    const fromIndex = Number(button.dataset.index);
    button.disabled = true;
    try {
      const rerun = await api(`/api/workflows/runs/${encodeURIComponent(runId)}/rerun`,
        { method: "POST", body: { from_index: fromIndex } });
      announce(`Rerunning ${runId} from agent call ${fromIndex} as ${rerun.run_id}.`);
      await redrawRegions(["workflows"]);
      await openRun(rerun.run_id);
    } catch (err) {
      button.disabled = false;
      announce(`Could not rerun ${runId}: ${err.message} (${err.code})`, { urgent: true });
    }
  },
});

ready(document.getElementById("workflows"));
ready(detail);
for (const form of document.querySelectorAll("form.start-form")) {
  form.addEventListener("submit", start);
  ready(form);
}
const asked = new URL(window.location.href).searchParams.get("run");
if (asked) openRun(asked);
