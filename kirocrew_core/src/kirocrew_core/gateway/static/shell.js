// The dashboard's shared module; a plugin page imports it:
//   import { api, announce, ApiError } from "/static/core/shell.js";
// api() calls the owner-authenticated JSON routes the way the gateway requires (same origin, the
// session cookie, so the browser sends Origin on every change) and turns {"error", "code"} answers
// into an ApiError; announce() speaks a status change through the page's live regions.

export class ApiError extends Error {
  constructor(message, code, status) {
    super(message);
    this.name = "ApiError";
    this.code = code;
    this.status = status;
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
      response.status);
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
