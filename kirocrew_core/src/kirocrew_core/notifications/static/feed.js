// The notification feed. Its buttons work by delegation on #feed: mark read, dismiss, or pick an action,
// each through the owner-authenticated /api/notifications routes, or mute and unmute the session that sent
// it (/api/messages/mute, …/unmute); then the feed is redrawn from this page's own server-rendered HTML
// (fetchPage), and an action with a link goes there.
import { api, announce, fetchPage } from "/static/core/shell.js";

let feed = document.getElementById("feed");

async function redraw() {
  const page = await fetchPage();
  const fresh = page.getElementById("feed");
  if (!fresh) return;
  feed.replaceWith(fresh);
  feed = fresh;
  feed.addEventListener("click", onClick);
}

async function onClick(event) {
  const button = event.target.closest("button[data-do]");
  if (!button || !feed.contains(button)) return;
  const card = button.closest("[data-id]");
  const id = encodeURIComponent(card.dataset.id);
  const what = button.dataset.do;
  if (what === "mute" || what === "unmute") {
    await changeMute(button, what);
    return;
  }
  const path = what === "action"
    ? `/api/notifications/${id}/actions/${encodeURIComponent(button.dataset.action)}`
    : `/api/notifications/${id}/${what}`;
  button.disabled = true;
  try {
    const answer = await api(path, { method: "POST", body: {} });
    if (what === "action" && answer.url) {
      window.location.assign(answer.url);
      return;
    }
    announce(what === "dismiss" ? "Notification dismissed." : what === "read" ? "Marked read." : "Choice recorded.");
    await redraw();
  } catch (err) {
    button.disabled = false;
    announce(`Could not ${what === "action" ? "record that" : what}: ${err.message}`, { urgent: true });
  }
}

async function changeMute(button, what) {
  button.disabled = true;
  try {
    await api(`/api/messages/${what}`, { method: "POST", body: { sender: button.dataset.sender } });
    announce(what === "mute" ? "Session muted: its messages stay here and go nowhere else." : "Session unmuted.");
    await redraw();
  } catch (err) {
    button.disabled = false;
    announce(`Could not ${what}: ${err.message}`, { urgent: true });
  }
}

feed.addEventListener("click", onClick);
