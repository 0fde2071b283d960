// Sova's operator console: reads and changes go through the manager's /v1 API with the
// operator's bearer token, so the manager's roles decide (a viewer's change is refused
// with 403 and the page says so). The token stays in this tab's sessionStorage and is
// sent only in the Authorization header, never in a URL. Every value from the API is put
// on the page as text (textContent), never as markup.
"use strict";

const KEY = "sova-console-token";
// SVG's namespace name: an identifier, never fetched.
const SVG_NS = "http://www.w3.org/2000/svg";
const LIMIT = 50;
let autoTimer = null;

const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, method, path, detail) {
    super(`${method} ${path}: ${status} ${detail}`);
    this.status = status;
    this.method = method;
    this.path = path;
    this.detail = detail;
  }
}

function detailOf(data) {
  if (data === null || typeof data !== "object") return "";
  if (typeof data.error === "string") return data.error;
  if (typeof data.detail === "string") return data.detail;
  if (Array.isArray(data.detail)) {
    return data.detail.map((d) => `${d.field || (d.loc || []).join(".")}: ${d.msg}`).join("; ");
  }
  return JSON.stringify(data);
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + (sessionStorage.getItem(KEY) || "") };
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  let data = null;
  try {
    data = await r.json();
  } catch (e) {
    data = null;
  }
  if (!r.ok) throw new ApiError(r.status, method, path, detailOf(data));
  return data;
}

function say(kind, text) {
  const m = $("message");
  m.className = kind;
  m.textContent = text;
  m.hidden = false;
}

function failed(err) {
  if (!(err instanceof ApiError)) {
    say("error", `The manager could not be reached: ${err.message}`);
    return;
  }
  if (err.status === 401) {
    logout();
    say("error", `Not logged in (401): ${err.detail}. Paste a valid token.`);
  } else if (err.status === 403) {
    say("error", `Refused (403 Forbidden): ${err.detail}. Nothing was changed.`);
  } else {
    say("error", `${err.method} ${err.path} failed (${err.status}): ${err.detail}`);
  }
}

function when(s) {
  if (s === null || s === undefined) return "";
  // A demo's manager runs on its agents' simulated clock: seconds, not a date.
  if (s < 1e9) return `t=${s.toFixed(1)} s`;
  return new Date(s * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function pct(x) {
  return `${(100 * x).toFixed(0)} %`;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function button(td, id, label, action) {
  const b = document.createElement("button");
  b.type = "button";
  b.id = id;
  b.textContent = label;
  b.addEventListener("click", action);
  td.appendChild(b);
  return b;
}

function fill(tableId, rows, render) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren();
  for (const row of rows) {
    const tr = document.createElement("tr");
    render(tr, row);
    body.appendChild(tr);
  }
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    const td = cell(tr, "none");
    td.colSpan = $(tableId).tHead.rows[0].cells.length;
    body.appendChild(tr);
  }
}

// A host's link use in the reports the planner holds for it (its hot-spot window, at
// most n), oldest first: one point per report, the newest at the right edge, so hosts
// whose windows restarted (a migration, an agent's restart) show fewer points. The
// vertical scale is the share of the link, 0 to 100 %, the same for every host.
const SPARK_W = 120;
const SPARK_H = 34;

function svgEl(name, attrs) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

function sparkline(values, n, label) {
  const svg = svgEl("svg", {
    class: "spark",
    width: SPARK_W,
    height: SPARK_H,
    viewBox: `0 0 ${SPARK_W} ${SPARK_H}`,
    role: "img",
  });
  const title = svgEl("title", {});
  title.textContent =
    `${label} in the last ${values.length} of ${n} reports, oldest first: ` +
    (values.map(pct).join(", ") || "none yet");
  svg.appendChild(title);
  svg.setAttribute("aria-label", title.textContent);
  const pad = 2;
  const step = (SPARK_W - 2 * pad) / Math.max(n - 1, 1);
  const y = (v) => (pad + (1 - Math.min(Math.max(v, 0), 1)) * (SPARK_H - 2 * pad)).toFixed(1);
  const x = (i) => (SPARK_W - pad - (values.length - 1 - i) * step).toFixed(1);
  svg.appendChild(svgEl("rect", { class: "spark-area", x: 0, y: y(1), width: SPARK_W, height: y(0) - y(1) }));
  for (const v of [0.5, 1]) {
    svg.appendChild(svgEl("line", { class: "spark-grid", x1: 0, x2: SPARK_W, y1: y(v), y2: y(v) }));
  }
  if (values.length > 0) {
    const points = values.map((v, i) => `${x(i)},${y(v)}`).join(" ");
    svg.appendChild(svgEl("polyline", { class: "spark-line", points }));
    const last = values.length - 1;
    svg.appendChild(svgEl("circle", { class: "spark-dot", cx: x(last), cy: y(values[last]), r: 2.5 }));
  }
  return svg;
}

// Who leads and who stands by, from this manager's own /readyz (a leader's epoch is the
// store's leadership epoch; SQLite has none, being one manager's). The leader keeps no
// list of its standbys: they only read the store, and each one's /readyz names the
// leader it follows (x-sova-leader), which this page, held to its own origin, cannot ask.
function renderManagers(ready) {
  const here = window.location.origin;
  let text;
  if (ready.role === "leader") {
    const epoch = ready.epoch === null || ready.epoch === undefined
      ? "no epoch (SQLite store: one manager, no standby)"
      : `epoch ${ready.epoch}`;
    text = `leader: this manager, ${here}, ${epoch} · standbys: not known to the leader ` +
      "(a standby only reads the store; its /readyz names this leader)";
  } else {
    text = `this manager (${here}) is ${ready.role || "unreachable"}: ${ready.status || "?"}`;
  }
  $("managers").textContent = text;
}

function renderHosts(view, ready, history) {
  const hot = view.hosts.filter((h) => h.hot).length;
  const epoch = ready.epoch === null || ready.epoch === undefined ? "" : `, epoch ${ready.epoch}`;
  $("cluster-summary").textContent =
    `hosts: ${view.hosts.length} (hot: ${hot}) · open plans: ${view.open_plans} · ` +
    `fences: ${view.fences.length} · migrations in flight: ${view.leases.length} · ` +
    `mode: ${view.mode} · round ${view.rounds} · this manager: ${ready.role || "?"}${epoch}, ` +
    `${ready.status || "?"}`;
  renderManagers(ready);
  const windows = new Map(history.hosts.map((w) => [w.host, w]));
  fill("hosts", view.hosts, (tr, h) => {
    tr.dataset.host = h.host;
    if (h.hot) tr.className = "hot";
    cell(tr, h.host);
    cell(tr, h.state);
    cell(tr, `${h.age_s.toFixed(0)} s ago`, "num");
    cell(tr, pct(h.utilisation.cpu), "num");
    cell(tr, pct(h.utilisation.mem), "num");
    cell(tr, pct(h.utilisation.net), "num");
    const w = windows.get(h.host);
    const net = w ? w.net : [];
    const td = cell(tr, "", "spark");
    td.appendChild(sparkline(net, history.n, `${h.host}: link use`));
    const range = document.createElement("span");
    range.className = "spark-range";
    range.textContent = net.length ? `${pct(Math.min(...net))}–${pct(Math.max(...net))}` : "";
    td.appendChild(range);
    cell(tr, h.hot ? h.reason : "");
    cell(tr, Object.keys(h.vms).length, "num");
    cell(tr, h.mode);
    const fenced = [];
    if (h.maintenance !== null && h.maintenance !== undefined) fenced.push("maintenance");
    if (h.vf_frozen) fenced.push("VFs frozen");
    for (const vm of h.pinned_vms) fenced.push(`${vm} pinned`);
    cell(tr, fenced.join(", "));
    const d = h.directive;
    const flag = d ? (d.f ?? d.flag) : false;
    cell(tr, flag ? `move ${d.v ?? d.vm ?? "?"} to ${d.t ?? d.target}` : "");
  });
}

function renderPlans(page) {
  fill("plans", page.plans, (tr, p) => {
    tr.dataset.plan = String(p.id);
    cell(tr, p.id, "num");
    cell(tr, p.state, `state state-${p.state}`);
    cell(tr, p.actions.map((a) => `${a.vm}: ${a.src} → ${a.dst}`).join(", "));
    cell(tr, p.reason);
    cell(tr, when(p.created_s), "time");
    cell(tr, when(p.expires_s), "time");
    cell(tr, p.decided_by);
    const td = cell(tr, "");
    if (p.state === "proposed") {
      button(td, `approve-${p.id}`, "Approve", () => decide(p.id, "approve"));
      button(td, `reject-${p.id}`, "Reject", () => decide(p.id, "reject"));
    }
  });
}

function renderFences(fences) {
  fill("fences", fences, (tr, f) => {
    tr.dataset.fence = `${f.kind}/${f.name}`;
    cell(tr, f.kind);
    cell(tr, f.name);
    cell(tr, f.set_by);
    cell(tr, when(f.since_s), "time");
    cell(tr, f.reason);
    const td = cell(tr, "");
    button(td, `clear-${f.kind}-${f.name}`, "Clear", () => clearFence(f.kind, f.name));
  });
}

function renderDecisions(page) {
  fill("decisions", page.decisions, (tr, d) => {
    cell(tr, d.id, "num");
    cell(tr, when(d.time_s), "time");
    cell(tr, d.host);
    cell(tr, d.flag ? `${d.vm} → ${d.target}` : "", "time");
    cell(tr, d.hot_resources.join(", "));
    cell(tr, d.reason);
  });
}

function renderAudit(page) {
  fill("audit", page.entries, (tr, e) => {
    cell(tr, e.id, "num");
    cell(tr, when(e.time_s), "time");
    cell(tr, e.who);
    cell(tr, e.action);
    cell(tr, e.subject);
    cell(tr, e.detail);
  });
}

// The manager's own readiness (leader or standby, its epoch): open to all, and a 503
// still carries the body that says why.
async function readiness() {
  try {
    const r = await fetch("/readyz", { cache: "no-store", credentials: "omit" });
    return await r.json();
  } catch (e) {
    return { status: "unreachable" };
  }
}

async function load() {
  const newest = `order=newest&limit=${LIMIT}`;
  const [ready, cluster, history, plans, fences, decisions, audit] = await Promise.all([
    readiness(),
    api("GET", "/v1/cluster"),
    api("GET", "/v1/cluster/history"),
    api("GET", `/v1/plans?${newest}`),
    api("GET", "/v1/fences"),
    api("GET", `/v1/decisions?${newest}`),
    api("GET", `/v1/audit?${newest}`),
  ]);
  renderHosts(cluster, ready, history);
  renderPlans(plans);
  renderFences(fences);
  renderDecisions(decisions);
  renderAudit(audit);
  document.body.dataset.loaded = String(Date.now());
}

async function refresh() {
  try {
    await load();
  } catch (err) {
    failed(err);
  }
}

async function decide(id, verb) {
  try {
    const p = await api("POST", `/v1/plans/${id}/${verb}`, {
      reason: `${verb === "approve" ? "approved" : "rejected"} in the web console`,
    });
    say("ok", `Plan ${id}: ${p.state}.`);
  } catch (err) {
    failed(err);
  }
  await refresh();
}

async function setFence(ev) {
  ev.preventDefault();
  const kind = $("fence-kind").value;
  const name = $("fence-name").value.trim();
  const reason = $("fence-reason").value;
  try {
    const f = await api(
      "PUT",
      `/v1/fences/${encodeURIComponent(kind)}/${encodeURIComponent(name)}`,
      { reason },
    );
    say("ok", `Fence set: ${f.kind} on ${f.name}.`);
    $("fence-name").value = "";
    $("fence-reason").value = "";
  } catch (err) {
    failed(err);
  }
  await refresh();
}

async function clearFence(kind, name) {
  const path = `/v1/fences/${encodeURIComponent(kind)}/${encodeURIComponent(name)}`;
  try {
    await api("DELETE", `${path}?reason=${encodeURIComponent("cleared in the web console")}`);
    say("ok", `Fence cleared: ${kind} on ${name}.`);
  } catch (err) {
    failed(err);
  }
  await refresh();
}

function show(loggedIn) {
  $("login").hidden = loggedIn;
  $("console").hidden = !loggedIn;
  for (const id of ["refresh", "logout", "auto-label"]) $(id).hidden = !loggedIn;
  if (!loggedIn) {
    $("whoami").textContent = "";
    $("auto").checked = false;
    auto();
  }
}

function logout() {
  sessionStorage.removeItem(KEY);
  $("message").hidden = true;
  show(false);
}

async function enter() {
  try {
    const me = await api("GET", "/v1/whoami");
    $("whoami").textContent = `${me.name} (${me.role})`;
    document.body.dataset.role = me.role;
    show(true);
    await load();
  } catch (err) {
    failed(err);
  }
}

function auto() {
  if (autoTimer !== null) clearInterval(autoTimer);
  autoTimer = $("auto").checked ? setInterval(refresh, 10000) : null;
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token").value.trim();
    $("token").value = "";
    if (!token) return;
    sessionStorage.setItem(KEY, token);
    $("message").hidden = true;
    enter();
  });
  $("fence-form").addEventListener("submit", setFence);
  $("refresh").addEventListener("click", () => {
    $("message").hidden = true;
    refresh();
  });
  $("logout").addEventListener("click", logout);
  $("auto").addEventListener("change", auto);
  if (sessionStorage.getItem(KEY)) enter();
});
