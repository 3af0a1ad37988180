// The Echo page: posts the message through the shell's api() and announces the outcome.
import { api, announce, ApiError } from "/static/core/shell.js";

const form = document.getElementById("echo-form");
const input = document.getElementById("echo-message");
const answer = document.getElementById("echo-answer");
const button = form.querySelector("button");

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  button.disabled = true;
  try {
    const reply = await api("/api/dashboard-demo/echo", { method: "POST", body: { message: input.value } });
    answer.textContent = reply.echo;
    announce(`Echoed: ${reply.echo}`);
  } catch (err) {
    const text = err instanceof ApiError ? `${err.message} (${err.code})` : String(err);
    answer.textContent = text;
    announce(text, { urgent: true });
  } finally {
    button.disabled = false;
  }
});
