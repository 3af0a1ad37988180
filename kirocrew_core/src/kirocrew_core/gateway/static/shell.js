// The dashboard's shared module; a plugin page imports it:
//   import { api, announce, ApiError } from "/static/core/shell.js";
// api() calls the owner-authenticated JSON routes the way the gateway requires (same origin, the
// session cookie, so the browser sends Origin on every change) and turns {"error", "code"} answers
// into an ApiError (keeping the whole answer, and the field it names); announce() speaks a status
// change through the page's live regions; clearFieldErrors()/showFieldError() put a refusal at its
// form field; fetchPage() reads this page again so a page swaps in server-rendered HTML, never
// rebuilding it in script.

export class ApiError extends Error {
  constructor(message, code, status, body = null) {
    super(message);
    this.name = "ApiError";
    this.code = code;
    this.status = status;
    this.body = body; // the whole error answer (null when there was none)
    this.field = typeof body?.field === "string" && body.field !== "" ? body.field : undefined;
  }
}

export async function api(path, { method = "GET", body, signal } = {}) {
  const init = {
    method,
    mode: "same-origin",
    credentials: "same-origin",
    cache: "no-store",
    redirect: "error",
    headers: { Accept: "application/json" },
    signal,
  };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(`the gateway could not be reached (${err.message})`, "network_error", 0);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      throw new ApiError(`the gateway answered ${response.status} with something that is not JSON`,
        "bad_response", response.status);
    }
  }
  if (!response.ok) {
    const error = data !== null && typeof data === "object" ? data : {};
    throw new ApiError(error.error || `HTTP ${response.status}`, error.code || `http_${response.status}`,
      response.status, data !== null && typeof data === "object" ? data : null);
  }
  return data;
}

// Polite by default (role="status"); urgent uses the role="alert" region.
export function announce(message, { urgent = false } = {}) {
  const region = document.getElementById(urgent ? "alerts" : "announcer");
  if (!region) return;
  // Clearing first and writing a moment later makes a repeated message be read again.
  region.textContent = "";
  window.setTimeout(() => { region.textContent = message; }, 50);
}

// -- field errors: the message beside its field (an element with class "field-error", named in the
// field's aria-describedby) and aria-invalid on the field, so a screen reader reads both ------------------

// Every field error in `form` cleared: aria-invalid removed, each .field-error emptied and hidden.
export function clearFieldErrors(form) {
  for (const input of form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
  for (const error of form.querySelectorAll(".field-error")) {
    error.hidden = true;
    error.textContent = "";
  }
}

// The .field-error element `input` names in its aria-describedby (the template's convention), if any.
function errorElementOf(input) {
  const ids = (input.getAttribute("aria-describedby") || "").split(/\s+/).filter(Boolean);
  return ids.map((id) => document.getElementById(id)).find((el) => el?.classList.contains("field-error")) || null;
}

// Shows `message` at `inputs` (one field, or a group such as a fieldset's checkboxes): each gets
// aria-invalid and describes itself by the message element (`error`, else the .field-error its
// aria-describedby names); the first takes the focus unless `focus` is false; `alert` (the message
// unless given; null for none) is announced through the role="alert" region.
export function showFieldError(inputs, message, { error = null, focus = true, alert = message } = {}) {
  const fields = (Array.isArray(inputs) ? inputs : [inputs]).filter(Boolean);
  const target = error || (fields[0] ? errorElementOf(fields[0]) : null);
  for (const input of fields) {
    input.setAttribute("aria-invalid", "true");
    const described = (input.getAttribute("aria-describedby") || "").split(/\s+/).filter(Boolean);
    if (target?.id && !described.includes(target.id)) {
      input.setAttribute("aria-describedby", [...described, target.id].join(" "));
    }
  }
  if (target) {
    target.textContent = message;
    target.hidden = false;
  }
  if (focus) fields[0]?.focus();
  if (alert) announce(alert, { urgent: true });
}

// This page fetched again (its own address and query, or `path` of the same origin; the session cookie, never
// cached) and parsed, so a page swaps a region of it in by id: what a state looks like is decided by the server's
// template alone.
export async function fetchPage(path = window.location.pathname + window.location.search) {
  let response;
  try {
    response = await fetch(path, { credentials: "same-origin",
      cache: "no-store", headers: { Accept: "text/html" } });
  } catch (err) {
    throw new ApiError(`the gateway could not be reached (${err.message})`, "network_error", 0);
  }
  if (!response.ok) {
    throw new ApiError(`the page could not be reloaded (HTTP ${response.status})`, "page_reload", response.status);
  }
  return new DOMParser().parseFromString(await response.text(), "text/html");
}

// A page's buttons: a click on a button[data-do] runs actions[its data-do](button), for the buttons a redraw puts in
// later too. Only the actions' own names count (a data-do of "constructor" runs nothing).
export function onButtons(actions) {
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-do]");
    if (button && Object.hasOwn(actions, button.dataset.do)) actions[button.dataset.do](button);
  });
}

// The server renders a page's script-only buttons disabled (data-ready): they work once its module listens.
export function ready(root) {
  for (const button of root.querySelectorAll("button[data-ready]")) button.disabled = false;
}

// This page (or `path`) fetched again and each region of `ids` swapped for its fresh copy: an unchanged region
// keeps its frame, selection and focus; a region gone from the fresh page is removed. The #live element's
// data-stamp (a page's poll compares it) takes the fresh page's.
export async function redrawRegions(ids, path = undefined) {
  const page = await fetchPage(path);
  for (const id of ids) {
    const current = document.getElementById(id);
    const fresh = page.getElementById(id);
    if (current && fresh) {
      ready(fresh);
      if (current.outerHTML !== fresh.outerHTML) current.replaceWith(fresh);
    } else if (current) {
      current.remove();
    }
  }
  const live = document.getElementById("live");
  const stamp = page.getElementById("live")?.dataset.stamp;
  if (live && stamp) live.dataset.stamp = stamp;
  return page;
}
