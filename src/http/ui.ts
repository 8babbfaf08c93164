/**
 * GET /ui: the operator's page, for an incident. It opens on the tenant's recently active
 * trajectories (grants, denials, calls, spend); a trajectory (deep link `/ui#t=<trajectory>`) shows
 * its delegation tree by trajectory name with spend and call meters against their limits, revoked
 * and expired marked, the denials under the capability that was denied and refused attenuations
 * under the parent that asked, a chart of grants and denials over time (inline SVG), the top deny
 * reasons, and its audit stream, filterable. Above them, the calls waiting for a person's approval
 * (issue 17), each approved or rejected with a note from the page by a key with the approver role.
 *
 * The page holds no data of its own: it reads the API (GET /v1/audit/trajectories, /v1/audit,
 * /v1/capabilities/{id}, /v1/approvals) and resolves approvals (POST /v1/approvals/{id}) with the key the operator types, kept in a variable of the page only (no
 * storage, no cookie: gone with the tab). Script and styles come from this origin only under a
 * strict Content-Security-Policy, and every value from the API is written as text, never as HTML.
 */
import type { Hono } from 'hono';

export const UI_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'none'; " +
  "frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

export const UI_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Warrant — operator</title>
<link rel="stylesheet" href="/ui/app.css">
<script src="/ui/app.js" defer></script>
</head>
<body>
<header>
  <h1>Warrant</h1>
  <form id="connect">
    <label>API key (auditor; approver to resolve approvals) <input id="key" type="password" autocomplete="off" required></label>
    <button type="submit">Connect</button>
  </form>
  <form id="open">
    <label>Trajectory <input id="trajectory" autocomplete="off" required></label>
    <button type="submit">Open</button>
  </form>
  <p id="status" role="status"></p>
</header>
<main>
  <section id="approvals" hidden>
    <h2>Pending approvals</h2>
    <table id="pending"><thead><tr><th>tool</th><th>trajectory</th><th>call</th><th>target</th><th>args</th><th>cost</th><th>expires</th><th>note</th><th></th></tr></thead><tbody></tbody></table>
  </section>
  <section id="recent">
    <h2>Recent trajectories</h2>
    <table id="trajectories"><thead><tr><th>trajectory</th><th>last activity</th><th>grants</th><th>denials</th><th>calls</th><th>spent</th></tr></thead><tbody></tbody></table>
  </section>
  <section id="view" hidden>
    <h2>Trajectory <span id="view-name"></span></h2>
    <div id="overview">
      <figure id="chart">
        <figcaption>Grants and denials over time: <span id="chart-totals"></span></figcaption>
        <svg id="chart-svg" viewBox="0 0 640 180" width="640" height="180" role="img" aria-label="grants and denials over time"></svg>
      </figure>
      <div id="top-reasons"><h3>Top deny reasons</h3><ol id="reasons"></ol></div>
    </div>
    <h3>Delegation tree</h3>
    <div id="tree"></div>
    <h3>Audit stream</h3>
    <div id="filters">
      <label>Decision <select id="f-decision"><option value="">all</option><option>grant</option><option>deny</option></select></label>
      <label>Event <select id="f-event"><option value="">all</option><option>mint</option><option>attenuate</option><option>approve</option><option>approval</option><option>revoke</option><option>tool</option><option>access</option></select></label>
      <label>Search <input id="f-text" placeholder="reason, capability, target…"></label>
    </div>
    <table id="audit"><thead><tr><th>#</th><th>at</th><th>trajectory</th><th>event</th><th>decision</th><th>reason</th><th>message</th><th>capability</th><th>target</th><th>cost</th></tr></thead><tbody></tbody></table>
  </section>
</main>
</body>
</html>
`;

export const UI_CSS = `body{font:14px system-ui,sans-serif;margin:1.5rem;color:#222}
header form{display:inline-block;margin-right:1.5rem}
h2{margin-top:1.5rem}
table{border-collapse:collapse;margin-top:.5rem}td,th{border:1px solid #ddd;padding:.2rem .4rem;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.deny{background:#fff1f1}tr.selected{background:#eef4ff}td.denials.some{color:#b00020;font-weight:600}
#overview{display:flex;gap:2rem;flex-wrap:wrap;align-items:flex-start}
figure{margin:0}
#chart-svg{border:1px solid #ddd;background:#fafafa}
#chart-svg .grant{fill:#3a9d4a}#chart-svg .deny{fill:#d0453b}#chart-svg text{font-size:11px;fill:#555}
#chart-svg .axis{stroke:#999}
.legend-grant{color:#3a9d4a;font-weight:600}.legend-deny{color:#d0453b;font-weight:600}
ul.tree{list-style:none;padding-left:1.2rem;border-left:1px solid #ccc;margin:.2rem 0}
.cap{margin:.3rem 0;padding:.4rem .6rem;border:1px solid #ddd;border-radius:4px;max-width:60rem}
.cap .name{font-weight:600}.cap .id{font-family:monospace;color:#666;margin-left:.5rem}
.cap.status-revoked,.cap.status-expired{background:#f6f6f6}
.badge{display:inline-block;padding:0 .4rem;border-radius:3px;margin-left:.4rem;font-size:12px}
.badge.status-active{background:#e3f6e3}.badge.status-revoked{background:#f8d7da;color:#842029}.badge.status-expired{background:#e2e2e2;color:#555}
.meter{display:inline-flex;align-items:center;gap:.4rem;margin-right:1.2rem}
meter{width:9rem}
.denials,.refusals{margin:.3rem 0 0;padding-left:1.2rem}
.denial .code,.refusal .code{font-family:monospace;color:#b00020}
.message{color:#444}
#pending td.args{max-width:28rem}
#pending td.args pre{margin:0;max-height:12rem;overflow:auto;white-space:pre-wrap;overflow-wrap:anywhere}
#pending .side-effect{color:#842029;margin-left:.3rem}
#pending button{margin-right:.3rem}
`;

export const UI_JS = `'use strict';
// The API key lives in this variable only: never in storage or a cookie.
let apiKey = '';
let entries = [];
const MAX_PAGES = 20; // 20,000 audit rows per trajectory view
const SHOWN_ROWS = 500;
const TRAJECTORY = /^[A-Za-z0-9._:-]{1,128}$/;
// Characters that change how text reads without being seen (controls and format characters such as
// bidi overrides, zero-width and tag characters, line and paragraph separators, every default-ignorable
// code point, variation selectors included) are shown as \\u escapes where an approver reads a call:
// the text stays JSON, and what is seen is what is approved.
const INVISIBLE = /[\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}\\p{Default_Ignorable_Code_Point}]/gu;
const hex4 = (n) => '\\\\u' + n.toString(16).padStart(4, '0');
// (A newline is left as it is: JSON.stringify escapes those in strings, so a raw one is layout.)
const visible = (text) => text.replace(INVISIBLE, (ch) => {
  const cp = ch.codePointAt(0);
  if (ch === '\\n') return ch;
  return cp > 0xffff ? hex4(0xd800 + ((cp - 0x10000) >> 10)) + hex4(0xdc00 + ((cp - 0x10000) & 0x3ff)) : hex4(cp);
});
const $ = (s) => document.querySelector(s);
const el = (tag, props = {}, ...kids) => { const e = document.createElement(tag); Object.assign(e, props); e.append(...kids); return e; };
const svg = (tag, attrs = {}, ...kids) => {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  e.append(...kids);
  return e;
};
const status = (text) => { $('#status').textContent = text; };

class ApiFailure extends Error {}

async function api(path, method = 'GET', payload = undefined) {
  const headers = { authorization: 'Bearer ' + apiKey };
  if (payload !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers, credentials: 'omit', cache: 'no-store', ...(payload === undefined ? {} : { body: JSON.stringify(payload) }) });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new ApiFailure(body.error ? body.error.code : 'HTTP ' + res.status);
  return body;
}

/** Every audit row matching the query, oldest first (at most MAX_PAGES pages). */
async function auditRows(query) {
  const out = [];
  let after = null;
  for (let page = 0; page < MAX_PAGES; page++) {
    const q = new URLSearchParams({ ...query, limit: '1000' });
    if (after) q.set('after', after);
    const body = await api('/v1/audit?' + q);
    out.push(...body.entries);
    after = body.next;
    if (!after) return { rows: out, complete: true };
  }
  return { rows: out, complete: false };
}

const describe = (o) => !o ? '' : o.kind === 'path' ? 'path ' + (o.prefix ?? o.path) : o.kind === 'url' ? 'url ' + (o.prefix ?? o.url) : o.kind + ' ' + o.name + (o.port ? ':' + o.port : '');
const hashTrajectory = () => {
  const m = /^#t=(.*)$/.exec(location.hash);
  if (!m) return null;
  try { return decodeURIComponent(m[1]); } catch { return m[1]; }
};
const linkTo = (trajectory) => el('a', { href: '#t=' + encodeURIComponent(trajectory), textContent: trajectory });
/** The message of a denial: approve's own, or an attenuation's violations. */
function denyMessage(e) {
  const d = e.detail || {};
  if (typeof d.message === 'string') return d.message;
  if (Array.isArray(d.violations)) return d.violations.map((v) => v.code + ': ' + v.detail).join('; ');
  return '';
}
const fmt = (n) => Number.isInteger(n) ? String(n) : String(Math.round(n * 1e6) / 1e6);

// ---- pending approvals (issue 17) ----

/** The calls waiting for a person; hidden when the key may not list them. */
async function loadApprovals() {
  let approvals;
  try {
    ({ approvals } = await api('/v1/approvals?state=pending&limit=100'));
  } catch (e) {
    if (e instanceof ApiFailure && e.message === 'forbidden') { $('#approvals').hidden = true; return; }
    throw e;
  }
  $('#approvals').hidden = false;
  const rows = approvals.map((a) => {
    const note = el('input', { className: 'note', placeholder: 'note', maxLength: 1024 });
    const act = (decision) => {
      const b = el('button', { type: 'button', className: decision, textContent: decision === 'approve' ? 'Approve' : 'Reject' });
      b.addEventListener('click', () => void resolveApproval(a.approval_id, decision, note.value.trim()));
      return b;
    };
    // Whole, never cut: what the approver does not see is what the approval lets through. Long args
    // scroll inside their box (CSS max-height), one field a line.
    const args = visible(JSON.stringify(a.args, null, 2));
    const row = el('tr', {},
      el('td', { className: 'tool' }, a.tool + ' v' + a.tool_version, el('span', { className: 'side-effect', textContent: a.side_effect })),
      el('td', {}, linkTo(a.trajectory_id)),
      el('td', { className: 'call', textContent: a.call_id ?? '' }),
      el('td', { className: 'target', textContent: visible(a.op + ' ' + describe(a.target)) }),
      el('td', { className: 'args' }, el('pre', { textContent: args })),
      el('td', { className: 'num', textContent: fmt(a.cost) }),
      el('td', { className: 'at', textContent: a.expires_at }),
      el('td', {}, note),
      el('td', {}, act('approve'), act('reject')));
    row.dataset.approval = a.approval_id;
    return row;
  });
  $('#pending tbody').replaceChildren(...(rows.length ? rows : [el('tr', { className: 'none' }, el('td', { colSpan: 9, textContent: 'no calls waiting' }))]));
}

async function resolveApproval(id, decision, note) {
  try {
    const a = await api('/v1/approvals/' + encodeURIComponent(id), 'POST', note ? { decision, note } : { decision });
    const outcome = a.outcome ? a.outcome.decision + (a.outcome.reason ? ' ' + a.outcome.reason.code : '') : '';
    status('approval ' + id + ': ' + a.state + (outcome ? ' → ' + outcome : ''));
  } catch (e) {
    status('error: ' + (e instanceof ApiFailure ? e.message : 'the server could not be reached'));
  }
  try { await loadApprovals(); } catch { /* the status above says what happened */ }
}

// ---- recent trajectories ----

async function loadRecent() {
  const { trajectories } = await api('/v1/audit/trajectories?limit=50');
  const num = (v, cls = '') => el('td', { className: 'num ' + cls, textContent: fmt(v) });
  $('#trajectories tbody').replaceChildren(...trajectories.map((t) => {
    const row = el('tr', {},
      el('td', { className: 'name' }, linkTo(t.root_trajectory_id)),
      el('td', { className: 'at', textContent: t.last_at }),
      num(t.grants, 'grants'), num(t.denials, 'denials' + (t.denials > 0 ? ' some' : '')), num(t.calls, 'calls'), num(t.spent, 'spent'));
    row.dataset.trajectory = t.root_trajectory_id;
    if (t.root_trajectory_id === hashTrajectory()) row.className = 'selected';
    return row;
  }));
  return trajectories.length;
}

// ---- one trajectory ----

function meter(label, used, limit) {
  const box = el('span', { className: 'meter ' + label });
  if (limit === undefined || limit === null) {
    box.append(el('span', { className: 'text', textContent: label + ' ' + fmt(used) + ' (no limit)' }));
    return box;
  }
  const m = el('meter', { min: 0, max: limit, value: used, low: limit * 0.5, high: limit * 0.8, optimum: 0 });
  m.title = label + ' ' + fmt(used) + ' of ' + fmt(limit);
  box.append(el('span', { className: 'label', textContent: label }), m, el('span', { className: 'text', textContent: fmt(used) + ' / ' + fmt(limit) }));
  return box;
}

/** Denied calls of a capability, grouped by reason: count and the latest message. */
function denialList(rows) {
  const byCode = new Map();
  for (const e of rows) byCode.set(e.reason_code, { n: (byCode.get(e.reason_code)?.n ?? 0) + 1, last: e });
  return el('ul', { className: 'denials' }, ...[...byCode].map(([code, { n, last }]) => el('li', { className: 'denial' },
    'denied ', el('span', { className: 'code', textContent: code ?? '' }), n > 1 ? ' ×' + n : '', ': ',
    el('span', { className: 'message', textContent: denyMessage(last) }))));
}

/** Refused attenuations asked for by a parent, each with every violation. */
function refusalList(rows) {
  return el('ul', { className: 'refusals' }, ...rows.map((e) => {
    const asked = (e.detail && e.detail.requested_trajectory_id) || e.trajectory_id || '';
    const violations = e.detail && Array.isArray(e.detail.violations) ? e.detail.violations : [];
    return el('li', { className: 'refusal' }, 'refused attenuation' + (asked ? ' for ' + asked : '') + ': ',
      ...violations.flatMap((v, i) => [i ? '; ' : '', el('span', { className: 'code', textContent: v.code }), el('span', { className: 'message', textContent: ': ' + v.detail })]));
  }));
}

function capNode(cap, byId, rows) {
  const p = cap.predicate || {};
  const denied = rows.filter((e) => e.event === 'approve' && e.decision === 'deny' && e.capability_id === cap.capability_id);
  const refused = rows.filter((e) => e.event === 'attenuate' && e.decision === 'deny' && e.parent_id === cap.capability_id);
  const box = el('div', { className: 'cap status-' + cap.status },
    el('span', { className: 'name', textContent: cap.trajectory_id }),
    el('span', { className: 'id', textContent: cap.capability_id }),
    el('span', { className: 'badge status-' + cap.status, textContent: cap.status }),
    el('div', { className: 'rights', textContent: 'rights: ' + cap.rights.join(', ') + ' · objects: ' + cap.objects.map(describe).join('; ') }),
    el('div', { className: 'meters' }, meter('spent', cap.spent, p.budget), meter('calls', cap.calls, p.max_calls),
      el('span', { className: 'expires', textContent: (cap.status === 'expired' ? 'expired ' : 'expires ') + cap.expires_at })));
  if (denied.length) box.append(denialList(denied));
  if (refused.length) box.append(refusalList(refused));
  box.dataset.id = cap.capability_id;
  box.dataset.trajectory = cap.trajectory_id;
  const kids = cap.children.map((id) => byId.get(id)).filter(Boolean);
  return el('li', {}, box, kids.length ? el('ul', { className: 'tree' }, ...kids.map((k) => capNode(k, byId, rows))) : '');
}

const STEPS_S = [1, 5, 15, 60, 300, 900, 3600, 21600, 86400, 604800];

/** Grants and denials per time bucket, as paired bars; the totals in the caption. */
function renderChart(rows) {
  const W = 640, H = 180, L = 36, B = 24, T = 8;
  const times = rows.map((e) => Date.parse(e.at));
  const t0 = Math.min(...times), t1 = Math.max(...times);
  const step = (STEPS_S.find((s) => (t1 - t0) / (s * 1000) < 40) ?? STEPS_S[STEPS_S.length - 1]) * 1000;
  const start = Math.floor(t0 / step) * step;
  const n = Math.floor((t1 - start) / step) + 1;
  const buckets = Array.from({ length: n }, () => ({ grant: 0, deny: 0 }));
  rows.forEach((e, i) => { buckets[Math.floor((times[i] - start) / step)][e.decision] += 1; });
  const top = Math.max(1, ...buckets.map((b) => Math.max(b.grant, b.deny)));
  const slot = (W - L - 4) / n, bar = Math.max(1, Math.min(14, slot / 2 - 1));
  const y = (v) => H - B - (v / top) * (H - B - T);
  const kids = [
    svg('line', { class: 'axis', x1: L, y1: H - B, x2: W - 2, y2: H - B }),
    svg('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }),
    svg('text', { x: L - 4, y: T + 8, 'text-anchor': 'end' }, String(top)),
    svg('text', { x: L - 4, y: H - B, 'text-anchor': 'end' }, '0'),
    svg('text', { x: L, y: H - 6 }, new Date(start).toISOString().slice(0, 19) + 'Z'),
    svg('text', { x: W - 2, y: H - 6, 'text-anchor': 'end' }, 'per ' + (step >= 60000 ? step / 60000 + ' min' : step / 1000 + ' s')),
  ];
  buckets.forEach((b, i) => {
    const at = new Date(start + i * step).toISOString().slice(11, 19);
    for (const [k, dx] of [['grant', 0], ['deny', bar + 1]]) {
      if (b[k] === 0) continue;
      kids.push(svg('rect', { class: k, x: L + 2 + i * slot + dx, y: y(b[k]), width: bar, height: H - B - y(b[k]), 'data-count': b[k] },
        svg('title', {}, at + ': ' + b[k] + ' ' + (k === 'grant' ? 'granted' : 'denied'))));
    }
  });
  $('#chart-svg').replaceChildren(...kids);
  const grants = rows.filter((e) => e.decision === 'grant').length;
  $('#chart-totals').replaceChildren(el('span', { className: 'legend-grant', textContent: grants + ' grants' }), ' · ',
    el('span', { className: 'legend-deny', textContent: rows.length - grants + ' denials' }));
}

function renderReasons(rows) {
  const counts = new Map();
  for (const e of rows) if (e.decision === 'deny') counts.set(e.reason_code ?? '', (counts.get(e.reason_code ?? '') ?? 0) + 1);
  const top = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 5);
  $('#reasons').replaceChildren(...top.map(([code, n]) => { const li = el('li', {}, el('span', { className: 'code', textContent: code }), ' ', el('span', { className: 'count', textContent: String(n) })); li.dataset.code = code; return li; }));
  if (!top.length) $('#reasons').append(el('li', { className: 'none', textContent: 'no denials' }));
}

function renderAudit() {
  const d = $('#f-decision').value, ev = $('#f-event').value, text = $('#f-text').value.toLowerCase();
  const rows = entries.filter((e) => (!d || e.decision === d) && (!ev || e.event === ev) && (!text || JSON.stringify(e).toLowerCase().includes(text)));
  $('#audit tbody').replaceChildren(...rows.slice(-SHOWN_ROWS).reverse().map((e) => el('tr', { className: e.decision },
    ...[e.pos, e.at, e.trajectory_id ?? '', e.event, e.detail && e.detail.dry_run === true ? e.decision + ' (dry run)' : e.decision, e.reason_code ?? '', e.decision === 'deny' ? denyMessage(e) : '', e.capability_id ?? '', describe(e.target), e.cost === null ? '' : e.cost]
      .map((v) => el('td', { textContent: String(v) })))));
}

async function capabilities(ids) {
  const byId = new Map();
  let queue = [...new Set(ids)];
  while (queue.length) {
    const batch = queue.splice(0, 8).filter((id) => !byId.has(id));
    for (const cap of await Promise.all(batch.map((id) => api('/v1/capabilities/' + encodeURIComponent(id))))) {
      byId.set(cap.capability_id, cap);
      queue.push(...cap.children.filter((c) => !byId.has(c)));
    }
  }
  return byId;
}

async function openTrajectory(name) {
  $('#view').hidden = false;
  $('#view-name').textContent = name;
  $('#trajectory').value = name;
  for (const id of ['#tree', '#reasons', '#chart-svg', '#chart-totals', '#audit tbody']) $(id).replaceChildren();
  if (!TRAJECTORY.test(name)) { status('not a trajectory id: ' + name); return; }
  status('loading ' + name + '…');
  let view = await auditRows({ root_trajectory_id: name });
  if (!view.rows.length) {
    // A subagent's trajectory: its part of its root's view (a child's trajectory extends its parent's: "<parent>.<suffix>").
    const own = await auditRows({ trajectory_id: name });
    const root = own.rows.map((e) => e.root_trajectory_id).find(Boolean);
    if (root) {
      const tree = await auditRows({ root_trajectory_id: root });
      view = { rows: tree.rows.filter((e) => e.trajectory_id === name || (e.trajectory_id ?? '').startsWith(name + '.')), complete: tree.complete };
    } else view = own;
  }
  entries = view.rows;
  const issued = entries.filter((e) => (e.event === 'mint' || e.event === 'attenuate') && e.decision === 'grant').map((e) => e.capability_id);
  const byId = await capabilities(issued);
  const tops = [...byId.values()].filter((c) => !c.parent_id || !byId.has(c.parent_id));
  const orphans = entries.filter((e) => e.event === 'attenuate' && e.decision === 'deny' && !byId.has(e.parent_id));
  $('#tree').replaceChildren(el('ul', { className: 'tree' }, ...tops.map((c) => capNode(c, byId, entries))), orphans.length ? refusalList(orphans) : '');
  // The chart and the reasons count decisions: not a call's waiting (pending) nor a person's resolution of it.
  const decisions = entries.filter((e) => (e.decision === 'grant' || e.decision === 'deny') && e.event !== 'approval');
  if (decisions.length) renderChart(decisions);
  renderReasons(decisions);
  renderAudit();
  if (!entries.length) { status('no audit entries for ' + name); return; }
  status(name + ': ' + byId.size + ' capabilities, ' + entries.length + ' audit entries' + (view.complete ? '' : ' (the newest not loaded: too many)'));
}

async function show() {
  if (!apiKey) { const t = hashTrajectory(); status(t === null ? 'enter an API key' : 'enter an API key to open ' + t); return; }
  try {
    await loadApprovals();
    let n;
    try {
      n = await loadRecent();
    } catch (e) {
      // An approver's key without the auditor role: the approvals panel is the page.
      if (!(e instanceof ApiFailure && e.message === 'forbidden') || $('#approvals').hidden) throw e;
      status('this key may resolve approvals but not read the audit');
      return;
    }
    const t = hashTrajectory();
    if (t !== null) await openTrajectory(t);
    else { $('#view').hidden = true; status(n + ' recent trajectories'); }
  } catch (e) {
    status('error: ' + (e instanceof ApiFailure ? e.message : 'the server could not be reached'));
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('#connect').addEventListener('submit', (ev) => { ev.preventDefault(); apiKey = $('#key').value.trim(); void show(); });
  $('#open').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const hash = '#t=' + encodeURIComponent($('#trajectory').value.trim());
    if (location.hash === hash) void show(); // the same trajectory again: a refresh (no hashchange)
    else location.hash = hash;
  });
  window.addEventListener('hashchange', () => void show());
  for (const id of ['#f-decision', '#f-event', '#f-text']) $(id).addEventListener('input', renderAudit);
  void show();
});
`;

const headers = (type: string): Record<string, string> => ({
  'Content-Type': type,
  'Content-Security-Policy': UI_CSP,
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
});

/** Adds GET /ui and its script and styles. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any app's env
export function addUi(app: Hono<any>): void {
  app.get('/ui', (c) => c.body(UI_HTML, 200, headers('text/html; charset=utf-8')));
  app.get('/ui/app.js', (c) => c.body(UI_JS, 200, headers('text/javascript; charset=utf-8')));
  app.get('/ui/app.css', (c) => c.body(UI_CSS, 200, headers('text/css; charset=utf-8')));
}
