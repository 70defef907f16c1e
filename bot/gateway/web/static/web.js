// Switchboard's pages. Everything works without this script (plain forms and links); with it, the login link logs
// in by itself, the chat streams what the bot says, and its forms are sent without reloading the page.
"use strict";
(function () {
  const csrf = () => (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

  // The login link carries its secret in the fragment (never sent to a server or a log): post it, then forget it.
  const login = document.getElementById("login");
  if (login && location.hash.startsWith("#token=")) {
    login.querySelector('input[name="token"]').value = decodeURIComponent(location.hash.slice("#token=".length));
    history.replaceState(null, "", location.pathname);
    login.submit();
  }

  const list = document.getElementById("messages");
  if (!list) return;
  const agent = list.dataset.agent;

  const place = (id, html) => {
    const template = document.createElement("template");
    template.innerHTML = html; // rendered by the server: Markdown with every tag of the message escaped
    const fresh = template.content.firstElementChild;
    const old = document.getElementById("message-" + id);
    if (old) old.replaceWith(fresh);
    else list.appendChild(fresh);
    fresh.scrollIntoView({ block: "end" });
  };

  const events = new EventSource("/chat/" + encodeURIComponent(agent) + "/events");
  events.addEventListener("chat", (event) => {
    const change = JSON.parse(event.data);
    if (change.kind === "gone") {
      const old = document.getElementById("message-" + change.id);
      if (old) old.remove();
    } else {
      place(change.id, change.html);
    }
  });

  const notice = (text) => {
    let shown = document.querySelector("p.notice");
    if (!shown) {
      shown = document.createElement("p");
      shown.className = "notice";
      shown.setAttribute("role", "status");
      list.before(shown);
    }
    shown.textContent = text;
  };

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.action.includes("/chat/")) return;
    event.preventDefault();
    const data = new FormData(form);
    if (event.submitter && event.submitter.name) data.append(event.submitter.name, event.submitter.value);
    const response = await fetch(form.action, { method: "POST", body: data, headers: { "X-CSRF-Token": csrf() } });
    if (!response.ok) {
      notice("Not sent (" + response.status + "): " + (await response.text()).slice(0, 200));
      return;
    }
    const answer = await response.json();
    if (answer.notice) notice(answer.notice);
    if (form.id === "send") form.reset();
  });

  // Enter sends, Shift+Enter starts a new line.
  const text = document.getElementById("text");
  if (text) {
    text.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        document.getElementById("send").requestSubmit();
      }
    });
  }
})();
