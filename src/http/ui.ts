/**
 * GET /ui: an operator's page for one trajectory: its delegation tree (rights, objects, budget and
 * spend, revoked and expired marked) and its audit stream with denials and their reasons,
 * filterable. The page holds no data of its own: it asks for the tenant key and reads the API with
 * it (kept in sessionStorage). Script and styles are served from this origin only (CSP 'self'), and
 * every value is written as text, never as HTML.
 */

export const UI_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

export const UI_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Warrant — trajectory</title>
<link rel="stylesheet" href="/ui/app.css">
<script src="/ui/app.js" defer></script>
</head>
<body>
<header>
  <h1>Warrant</h1>
  <form id="load">
    <label>Tenant API key <input id="key" type="password" autocomplete="off" required></label>
    <label>Trajectory <input id="trajectory" required pattern="[A-Za-z0-9._:-]{1,128}"></label>
    <button type="submit">Show</button>
  </form>
  <p id="status" role="status"></p>
</header>
<main>
  <section><h2>Delegation tree</h2><div id="tree"></div></section>
  <section>
    <h2>Audit stream</h2>
    <div id="filters">
      <label>Decision <select id="f-decision"><option value="">all</option><option>grant</option><option>deny</option></select></label>
      <label>Event <select id="f-event"><option value="">all</option><option>mint</option><option>attenuate</option><option>approve</option><option>revoke</option></select></label>
      <label>Search <input id="f-text" placeholder="reason, capability, target…"></label>
    </div>
    <table id="audit"><thead><tr><th>#</th><th>at</th><th>event</th><th>decision</th><th>reason</th><th>capability</th><th>op</th><th>target</th><th>cost</th></tr></thead><tbody></tbody></table>
  </section>
</main>
</body>
</html>
`;

export const UI_CSS = `body{font:14px system-ui,sans-serif;margin:1.5rem;color:#222}
form label,#filters label{margin-right:1rem}
ul.tree{list-style:none;padding-left:1.2rem;border-left:1px solid #ccc}
.cap{margin:.3rem 0;padding:.3rem .5rem;border:1px solid #ddd;border-radius:4px}
.cap .id{font-family:monospace}
.badge{display:inline-block;padding:0 .4rem;border-radius:3px;margin-left:.4rem;font-size:12px}
.status-active{background:#e3f6e3}.status-revoked{background:#f8d7da}.status-expired{background:#eee;color:#777}
table{border-collapse:collapse;margin-top:.5rem}td,th{border:1px solid #ddd;padding:.2rem .4rem;text-align:left}
tr.deny{background:#fff1f1}
`;

export const UI_JS = `'use strict';
const $ = (s) => document.querySelector(s);
const el = (tag, props = {}, ...kids) => { const e = document.createElement(tag); Object.assign(e, props); e.append(...kids); return e; };
let entries = [];

async function api(path) {
  const res = await fetch(path, { headers: { authorization: 'Bearer ' + sessionStorage.getItem('warrant-key') } });
  const body = await res.json();
  if (!res.ok) throw new Error(body.error ? body.error.code : 'HTTP ' + res.status);
  return body;
}

async function auditOf(trajectory) {
  const out = [];
  let after = null;
  do {
    const q = new URLSearchParams({ trajectory_id: trajectory, limit: '1000' });
    if (after) q.set('after', after);
    const page = await api('/v1/audit?' + q);
    out.push(...page.entries);
    after = page.next;
  } while (after);
  return out;
}

const describe = (o) => o.kind === 'path' || o.kind === 'url' ? o.kind + ' ' + o.prefix : o.kind + ' ' + o.name + (o.port ? ':' + o.port : '');

function capNode(cap, byId) {
  const p = cap.predicate || {};
  const budget = p.budget === undefined ? 'no budget' : 'spent ' + cap.spent + ' of ' + p.budget;
  const calls = p.max_calls === undefined ? cap.calls + ' calls' : cap.calls + ' of ' + p.max_calls + ' calls';
  const box = el('div', { className: 'cap status-' + cap.status },
    el('span', { className: 'id', textContent: cap.capability_id }),
    el('span', { className: 'badge status-' + cap.status, textContent: cap.status }),
    el('div', { className: 'rights', textContent: 'rights: ' + cap.rights.join(', ') }),
    el('div', { className: 'objects', textContent: 'objects: ' + cap.objects.map(describe).join('; ') }),
    el('div', { className: 'spend', textContent: budget + ' · ' + calls + ' · expires ' + cap.expires_at }));
  box.dataset.id = cap.capability_id;
  const kids = cap.children.map((id) => byId.get(id)).filter(Boolean);
  return el('li', {}, box, kids.length ? el('ul', { className: 'tree' }, ...kids.map((k) => capNode(k, byId))) : '');
}

function renderAudit() {
  const d = $('#f-decision').value, ev = $('#f-event').value, text = $('#f-text').value.toLowerCase();
  const rows = entries.filter((e) => (!d || e.decision === d) && (!ev || e.event === ev) && (!text || JSON.stringify(e).toLowerCase().includes(text)));
  $('#audit tbody').replaceChildren(...rows.map((e) => el('tr', { className: e.decision },
    ...[e.pos, e.at, e.event, e.decision, e.reason_code || '', e.capability_id || '', e.op || '', e.target ? describe({ ...e.target, prefix: e.target.path || e.target.url }) : '', e.cost === null ? '' : e.cost]
      .map((v) => el('td', { textContent: String(v) })))));
}

async function load(ev) {
  ev.preventDefault();
  sessionStorage.setItem('warrant-key', $('#key').value);
  $('#status').textContent = 'loading…';
  try {
    const first = await auditOf($('#trajectory').value.trim());
    const roots = [...new Set(first.filter((e) => (e.event === 'mint' || e.event === 'attenuate') && e.decision === 'grant').map((e) => e.capability_id))];
    const byId = new Map();
    const queue = [...roots];
    while (queue.length) {
      const id = queue.shift();
      if (byId.has(id)) continue;
      const cap = await api('/v1/capabilities/' + encodeURIComponent(id));
      byId.set(id, cap);
      queue.push(...cap.children);
    }
    const tops = [...byId.values()].filter((c) => !c.parent_id || !byId.has(c.parent_id));
    $('#tree').replaceChildren(el('ul', { className: 'tree' }, ...tops.map((c) => capNode(c, byId))));
    const trajectories = [...new Set([...byId.values()].map((c) => c.trajectory_id))];
    const all = (await Promise.all(trajectories.map(auditOf))).flat();
    entries = [...new Map(all.map((e) => [e.id, e])).values()].sort((a, b) => a.pos - b.pos);
    renderAudit();
    $('#status').textContent = byId.size + ' capabilities, ' + entries.length + ' audit entries';
  } catch (e) {
    $('#status').textContent = 'error: ' + e.message;
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('#key').value = sessionStorage.getItem('warrant-key') || '';
  $('#load').addEventListener('submit', load);
  for (const id of ['#f-decision', '#f-event', '#f-text']) $(id).addEventListener('input', renderAudit);
});
`;
