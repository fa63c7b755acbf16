// Forge's web page. Everything it shows comes from the API; every piece of stored or model text
// is set with textContent (never innerHTML), and the page runs under a strict CSP.
"use strict";

const TOKEN_KEY = "forge-api-token";
const $ = (id) => document.getElementById(id);
let tokenWaiters = [];

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else if (k === "onclick") node.addEventListener("click", v);
    else node[k] = v;
  }
  for (const c of children) if (c != null) node.append(c);
  return node;
}

function showError(message) {
  $("error").textContent = message || "";
}

// -- the token: asked once, kept for this tab (sessionStorage), sent on every call ------------

function token() { return sessionStorage.getItem(TOKEN_KEY); }

function askToken(message) {
  $("token-form").hidden = false;
  $("token-error").textContent = message || "";
  $("token-input").focus();
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
  $("token-input").value = "";
  $("token-form").hidden = true;
  const waiters = tokenWaiters; tokenWaiters = [];
  waiters.forEach((resolve) => resolve());
});

function headers(extra = {}) {
  const h = { ...extra };
  if (token()) h["Authorization"] = "Bearer " + token();
  return h;
}

async function request(method, path, body, extraHeaders = {}) {
  for (;;) {
    const init = { method, headers: headers(extraHeaders) };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      await askToken(token() ? "" : "This server needs its API token.");
      continue;
    }
    return response;
  }
}

async function api(method, path, body) {
  const response = await request(method, path, body);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const err = new Error(data.error || ("HTTP " + response.status));
    err.status = response.status;
    throw err;
  }
  return data;
}

// -- header: context gauge and chat server status ----------------------------------------------

async function refreshContext() {
  const c = await api("GET", "/context");
  const total = c.router_prompt.total, t = c.thresholds;
  const share = Math.min(1, total / t.tokens);
  const fill = $("gauge-fill");
  fill.style.width = (share * 100).toFixed(1) + "%";
  fill.className = "gauge-fill" + (share >= 1 ? " hot" : share >= t.target / t.tokens ? " warm" : "");
  $("gauge-target").style.left = (100 * t.target / t.tokens).toFixed(1) + "%";
  $("gauge").dataset.tokens = String(total);
  $("gauge-text").textContent = `context: ${total} / ${t.tokens} tokens (target ${t.target}) · ` +
    `${c.unpinned} / ${t.messages} messages` + (c.trigger ? ` · compaction due (${c.trigger})` : "");
}

async function refreshStatus() {
  // /health says only "ok"; what the header shows needs the token (asked for on a 401)
  const s = await api("GET", "/status");
  setChatDown(!(s.chat_server && s.chat_server.up));
  return s;
}

function setChatDown(down) {
  const s = $("chat-status");
  s.textContent = down ? "chat server: down" : "chat server: up";
  s.className = "status " + (down ? "down" : "up");
  $("chat-down").hidden = !down;
}

// -- chat ---------------------------------------------------------------------------------------

function messageNode(m) {
  const pinButton = el("button", { text: m.pinned ? "unpin" : "pin", title: m.pinned ? "unpin this message" : "pin this exchange",
    onclick: () => (m.pinned ? unpin(m.id) : pin(m.id)).catch((e) => showError(e.message)) });
  const meta = el("div", { class: "meta" }, el("span", { text: "#" + m.id }), el("span", { text: m.role }),
    m.answered === false ? el("span", { text: "answered nothing" }) : null, pinButton);
  return el("li", { class: `msg ${m.role}` + (m.answered === false ? " unanswered" : ""), "data-id": String(m.id) },
    meta, el("div", { class: "text", text: m.content }));
}

async function refreshHistory() {
  const messages = await api("GET", "/history?n=60");
  const log = $("chat-log");
  log.replaceChildren(...messages.map(messageNode));
  log.scrollTop = log.scrollHeight;
}

function parseEvents(buffer, onEvent) {
  // Server-sent events read from a fetch stream (EventSource cannot send the Authorization header).
  let cut;
  while ((cut = buffer.indexOf("\n\n")) >= 0) {
    const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
    let event = "message", data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) event = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
    }
    onEvent(event, data ? JSON.parse(data) : null);
  }
  return buffer;
}

let lastTurn = { tokens: 0, answered: false, persisted: 0, failed: false };

async function sendChat(message) {
  const log = $("chat-log");
  log.append(el("li", { class: "msg user pending" }, el("div", { class: "text", text: message })));
  const answer = el("div", { class: "text", text: "" });
  const bubble = el("li", { class: "msg assistant streaming", id: "streaming" }, answer);
  log.append(bubble);
  log.scrollTop = log.scrollHeight;
  $("chat-send").disabled = true;
  try {
    const response = await request("POST", "/chat", { message, stream: true }, { Accept: "text/event-stream" });
    if (!response.ok) {
      const data = await response.json().catch(() => ({}));
      if (response.status === 502) setChatDown(true);
      throw new Error(data.error || "HTTP " + response.status);
    }
    setChatDown(false);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", final = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer = parseEvents(buffer + decoder.decode(value, { stream: true }), (event, data) => {
        if (event === "token") {
          answer.textContent += data.text;
          bubble.dataset.tokens = String(Number(bubble.dataset.tokens || 0) + 1);
        } else if (event === "done") final = data;
        else if (event === "error") throw new Error(data.error);
      });
    }
    if (final) {
      answer.textContent = final.reply || `(${final.notice || "no reply kept"})`;
      bubble.dataset.answered = String(final.answered);
      bubble.dataset.persisted = String(final.persisted.length);
    }
    lastTurn = { tokens: Number(bubble.dataset.tokens || 0), answered: final ? final.answered : false,
                 persisted: final ? final.persisted.length : 0, failed: false };
  } catch (e) {
    bubble.classList.add("failed");
    lastTurn = { tokens: Number(bubble.dataset.tokens || 0), answered: false, persisted: 0, failed: true };
    answer.textContent = "[error] " + e.message;
    showError(e.message);
    await refreshTraces().catch(() => {});
    turnDone();
    return;
  } finally {
    $("chat-send").disabled = false;
    bubble.classList.remove("streaming");
    bubble.removeAttribute("id");

  }
  await Promise.all([refreshHistory(), refreshTraces(), refreshContext(), refreshDrawer()]);
  turnDone();
}

function turnDone() {
  // What the last turn did, for whoever watches the page (the browser tests read it).
  const d = document.body.dataset;
  d.lastTokens = String(lastTurn.tokens);
  d.lastAnswered = String(lastTurn.answered);
  d.lastPersisted = String(lastTurn.persisted);
  d.lastFailed = String(lastTurn.failed);
  d.turns = String(Number(d.turns || 0) + 1);
}

$("chat-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("chat-input").value;
  if (!text.trim()) return;
  $("chat-input").value = "";
  showError("");
  sendChat(text);
});
$("chat-input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("chat-form").requestSubmit(); }
});

// -- traces: ✓ answered, ∅ ran and answered nothing, ✗ failed ---------------------------------

function traceState(r) {
  if (!r.ok) return ["✗", "failed"];
  if (r.not_answered) return ["∅", "unanswered"];
  return ["✓", "answered"];
}

async function refreshTraces() {
  const records = await api("GET", "/traces?n=8");
  $("trace-cards").replaceChildren(...records.reverse().map((r) => {
    const [mark, cls] = traceState(r);
    // a model is often reported as a file path: its name is what a reader needs
    const models = (r.llm && r.llm.models && r.llm.models.length)
      ? r.llm.models.map((m) => m.split("/").pop()).join(", ") : "no model";
    const ms = r.total_ms == null ? "?" : Math.round(r.total_ms);
    const why = r.error || r.not_answered;
    return el("li", { class: "card " + cls, "data-run": r.run_id, "data-state": cls },
      el("div", {}, el("span", { class: "state", text: mark }), el("span", { class: "input", text: r.user_input_preview || "" })),
      el("div", { class: "muted", text: `${ms} ms · ${models}` + ((r.steps || []).length ? " · " + r.steps.map((s) => s.tool).join(",") : "") }),
      why ? el("div", { class: "muted", text: why }) : null);
  }));
}

// -- the drawer ---------------------------------------------------------------------------------

async function refreshDrawer() {
  const pinned = await api("GET", "/drawer");
  const list = $("drawer-list");
  if (!pinned.length) { list.replaceChildren(el("li", { class: "muted", text: "nothing pinned" })); return; }
  list.replaceChildren(...pinned.map((m) => el("li", { class: "entry", "data-id": String(m.id) },
    el("span", { class: "muted", text: `#${m.id} ${m.role}` }), el("span", { class: "content", text: m.content }),
    el("button", { text: "unpin", onclick: () => unpin(m.id).catch((e) => showError(e.message)) }))));
}

async function pin(id) {
  await api("POST", "/drawer/pin", { id });
  await Promise.all([refreshHistory(), refreshDrawer(), refreshContext()]);
}

async function unpin(id) {
  await api("POST", "/drawer/unpin", { id });
  await Promise.all([refreshHistory(), refreshDrawer(), refreshContext()]);
}

// -- memory: list by kind, remember, forget -----------------------------------------------------

// An entry's date (YYYY-MM-DD) in the browser's time zone, from its stored UTC `created`; a `?`
// after it when its time is unknown (an import without times: the day it was stored).
function entryDate(e) {
  return localDate(e.created) + (e.created_known === false ? "?" : "");
}

function localDate(iso) {
  const d = new Date(iso);
  if (isNaN(d)) return String(iso || "").slice(0, 10);
  const two = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}`;
}

// one page at a time (GET /memory answers 100 by default); "more" appends the next page
const MEMORY_PAGE = 100;
let memoryEntries = [], memoryCursor = null;

async function refreshMemory(more = false) {
  const params = new URLSearchParams({ limit: String(MEMORY_PAGE) });
  const kind = $("memory-kind").value, q = $("memory-filter").value.trim();
  if (kind) params.set("kind", kind);
  if (q) params.set("q", q);
  if (more && memoryCursor) params.set("cursor", memoryCursor);
  const data = await api("GET", "/memory?" + params);
  memoryEntries = more ? memoryEntries.concat(data.entries) : data.entries;
  memoryCursor = data.next_cursor;
  const counts = Object.entries(data.by_kind).map(([k, n]) => `${k} ${n}`).join(", ");
  $("memory-counts").textContent = counts || "no entries yet";
  $("memory-shown").textContent = `showing ${memoryEntries.length} of ${data.total}` + (q ? ` matching "${q}"` : "");
  $("memory-panel").dataset.total = String(data.total);
  $("memory-more").hidden = !memoryCursor;
  const groups = new Map();
  for (const e of memoryEntries) {
    if (!groups.has(e.kind)) groups.set(e.kind, []);
    groups.get(e.kind).push(e);
  }
  $("memory-list").replaceChildren(...[...groups].map(([k, entries]) => el("div", { class: "kind-group", "data-kind": k },
    el("h3", { text: `${k} (${entries.length})` }),
    ...entries.map((e) => el("div", { class: "entry", "data-id": String(e.id) },
      el("span", { class: "muted", text: "#" + e.id + (e.project ? " " + e.project : "") }),
      el("span", { class: "date muted", text: entryDate(e) }),
      el("span", { class: "content", text: e.content }),
      el("button", { text: "forget", onclick: () => forget(e.id).catch((err) => showError(err.message)) }))))));
}

$("memory-more").addEventListener("click", () => refreshMemory(true).catch((e) => showError(e.message)));
let filterTimer = null;
$("memory-filter").addEventListener("input", () => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => refreshMemory().catch((e) => showError(e.message)), 250);
});

async function forget(id) {
  await api("DELETE", "/memory/" + id);
  await Promise.all([refreshMemory(), refreshContext()]);
}

$("memory-kind").addEventListener("change", () => refreshMemory().catch((e) => showError(e.message)));

$("remember-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  showError("");
  const content = $("remember-content").value;
  const project = $("remember-project").value.trim();
  try {
    const r = await api("POST", "/remember", { kind: $("remember-kind").value, content, project: project || null });
    $("remember-content").value = "";
    $("recall-note").textContent = r.created ? `remembered #${r.id}` : `already stored as #${r.id}`;
    await Promise.all([refreshMemory(), refreshContext()]);
  } catch (e) { showError(e.message); }
});

// -- recall: each row's channel and distance ----------------------------------------------------

// What the CLI's table says before a row's content: what replaced it, which row is newer, what
// a replacement stands in for.
function rowMarks(r) {
  const marks = [];
  if (r.in_place_of) marks.push(`(in place of ${r.in_place_of.map((i) => "#" + i).join(", ")}) `);
  if (r.superseded_reason === "replace" && r.superseded_by != null) {
    marks.push(`(replaced by #${r.superseded_by}) `);
  } else if (r.newer != null) {
    marks.push(`(older: #${r.newer} is newer) `);
  }
  return marks.join("");
}

$("recall-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  showError("");
  const q = $("recall-query").value;
  const body = $("recall-results").tBodies[0];
  try {
    const result = await api("GET", "/search?q=" + encodeURIComponent(q));
    body.replaceChildren(...result.rows.map((r) => el("tr", { "data-id": String(r.id) },
      el("td", { text: "#" + r.id }), el("td", { class: "date", text: entryDate(r) }),
      el("td", { text: r.kind }),
      el("td", { class: "channel", text: r.channel }),
      el("td", { class: "distance", text: r.distance == null ? "—" : r.distance.toFixed(4) }),
      el("td", { text: rowMarks(r) + r.content }))));
    const t = result.time;
    const window = t ? `time window ${t.from_query ? `"${t.from_query}" ` : ""}` +
      `${t.since ? localDate(t.since) : "…"} to ${t.until ? localDate(t.until) : "now"}` : "";
    $("recall-note").textContent = result.rows.length ? window
      : t && t.excluded != null ? `${window}: no entry in it (${t.excluded} outside it match)`
      : "nothing found (a refusal, not an error)";
  } catch (e) { body.replaceChildren(); showError(e.message); }
});

// -- start --------------------------------------------------------------------------------------

async function start() {
  try {
    await refreshStatus();
    await Promise.all([refreshContext(), refreshHistory(), refreshTraces(), refreshDrawer(), refreshMemory()]);
    document.body.dataset.ready = "1";
  } catch (e) { showError(e.message); }
  setInterval(() => refreshStatus().catch(() => setChatDown(true)), 15000);
}

start();
