// The console's shell: a hash router over the views, the key login, a toast for errors.

import { ApiError, api, auth } from "./api.js";
import { auditView } from "./audit.js";
import { sessionView } from "./session.js";
import { sessionsView } from "./sessions.js";
import { $, html } from "./util.js";
import { workflowsView } from "./workflows.js";

const view = $("#view");
let leave = () => {};

function toast(message) {
  const box = $("#toasts");
  const item = document.createElement("div");
  item.className = "toast";
  item.textContent = message;
  box.appendChild(item);
  setTimeout(() => item.remove(), 6000);
}

function loginView(root, { params }) {
  root.innerHTML = String(html`<form class="login panel" id="login">
    <h1>Sign in</h1>
    <p class="muted">This server asks for an API key (<code>TURNSTREAM_HTTP_KEYS_FILE</code>).
    It is kept in this browser's local storage and sent as <code>Authorization: Bearer</code>.</p>
    <input type="password" name="key" placeholder="API key" aria-label="API key" autocomplete="current-password" required>
    <button>Sign in</button>
    <p class="bad" id="login-error"></p>
  </form>`);
  $("#login", root).addEventListener("submit", async (e) => {
    e.preventDefault();
    auth.key = new FormData(e.target).get("key").trim();
    try {
      await api("/v1/sessions?limit=1");
      location.hash = params.get("next") || "#/";
    } catch (error) {
      // a key with no read scope on every session still signs in (403): it may read some
      if (error instanceof ApiError && error.status === 403) {
        location.hash = params.get("next") || "#/";
        return;
      }
      auth.key = null;
      $("#login-error", root).textContent = error.message;
    }
  });
  return () => {};
}

auth.onUnauthenticated = () => {
  if (!location.hash.startsWith("#/login")) {
    location.hash = `#/login?next=${encodeURIComponent(location.hash || "#/")}`;
  }
};

function route() {
  leave();
  const [path, query] = (location.hash.slice(1) || "/").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean);
  const ctx = { params, toast };
  let name = "sessions";
  if (parts[0] === "s" && parts[1]) {
    name = "session";
    leave = sessionView(view, { ...ctx, session: decodeURIComponent(parts[1]) });
  } else if (parts[0] === "workflows") {
    name = "workflows";
    leave = workflowsView(view, ctx);
  } else if (parts[0] === "audit") {
    name = "audit";
    leave = auditView(view, ctx);
  } else if (parts[0] === "login") {
    name = "login";
    leave = loginView(view, ctx);
  } else {
    leave = sessionsView(view, ctx);
  }
  document.body.dataset.view = name;
  for (const a of document.querySelectorAll("nav a[data-nav]")) {
    a.classList.toggle("current", a.dataset.nav === name || (name === "session" && a.dataset.nav === "sessions"));
  }
  $("#key-state").textContent = auth.key ? "key set · sign out" : "";
  window.scrollTo(0, 0);
}

$("#key-state").addEventListener("click", (e) => {
  e.preventDefault();
  auth.key = null;
  location.hash = "#/login";
});
window.addEventListener("hashchange", route);
route();
