/**
 * Example requests and answers shown in /openapi.json, taken from the README's walk-through (tokens
 * and hashes shortened or made up). test/http/openapi-responses.test.ts holds each to its schema.
 */

const TOKEN = 'eyJhbGciOiJFZERTQSIsImtpZCI6IkFiQ2RFZkdoSWpLbE1uT3AifQ.eyJqdGkiOiJjYXBfY3h6SV95X2d2Wll0WUVWbkR0WG5uQSJ9.9bZb0FaNnXnOgVxnrB-HDQ';
const HASH = '5f0c2b8e4d1a7c3e9f60b1a2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6';
const PREV = '0000000000000000000000000000000000000000000000000000000000000000';

const root = {
  capability_id: 'cap_cxzI_y_gvZYtYEVnDtXnnA',
  trajectory_id: 't-1',
  parent_id: null,
  depth: 0,
  rights: ['read', 'write'],
  objects: [{ kind: 'path', prefix: '/workspace/t-1' }],
  predicate: { budget: 1, max_calls: 10, max_depth: 2 },
  expires_at: '2026-12-03T08:17:27Z',
};

const key = {
  key_id: 'Qm9vX2tleV9p',
  name: 'runtime-1',
  roles: ['runtime'],
  created_at: '2026-12-03T07:17:27.000Z',
  expires_at: null,
  revoked_at: null,
  state: 'active',
};

const entry = {
  id: 'aud_D-y8cbxpLuDHrCtUsoabIg',
  pos: 3,
  tree_id: 'cap_cxzI_y_gvZYtYEVnDtXnnA',
  seq: 3,
  at: '2026-12-03T07:18:02.114Z',
  event: 'approve',
  decision: 'grant',
  reason_code: null,
  capability_id: 'cap_7NQkKahS19PeFEu8kzDFZw',
  parent_id: 'cap_cxzI_y_gvZYtYEVnDtXnnA',
  trajectory_id: 't-1.sub-1',
  op: 'read',
  target: { kind: 'path', path: '/workspace/t-1/src/main.py' },
  cost: 0.1,
  call_id: 'call-1',
  detail: { requested_target: { kind: 'path', path: '/workspace/t-1/src/main.py' } },
  key_id: 'Qm9vX2tleV9p',
  request_id: 'req_8JkQ2v1mXn0',
  root_trajectory_id: 't-1',
  hash: HASH,
  prev_hash: PREV,
};

export const EXAMPLES = {
  mint: {
    trajectory_id: 't-1',
    rights: ['read', 'write'],
    objects: [{ kind: 'path', prefix: '/workspace/t-1' }],
    predicate: { budget: 1, max_calls: 10, max_depth: 2 },
    ttl_s: 3600,
  },
  attenuate: {
    parent_token: TOKEN,
    trajectory_id: 't-1.sub-1',
    rights: ['read'],
    objects: [{ kind: 'path', prefix: '/workspace/t-1/src' }],
    predicate: { budget: 0.5, max_calls: 5, max_depth: 1 },
    ttl_s: 600,
  },
  approve: {
    token: TOKEN,
    op: 'read',
    target: { kind: 'path', path: '/workspace/t-1/src/main.py' },
    cost: 0.1,
    call_id: 'call-1',
    args: { timeout_ms: 30000 },
  },
  revoke: { capability_id: 'cap_cxzI_y_gvZYtYEVnDtXnnA', reason: 'trajectory finished' },
  createKey: { name: 'runtime-1', roles: ['runtime'], ttl_s: 86400 },

  issued: { ...root, token: TOKEN },
  attenuated: {
    capability_id: 'cap_7NQkKahS19PeFEu8kzDFZw',
    trajectory_id: 't-1.sub-1',
    parent_id: 'cap_cxzI_y_gvZYtYEVnDtXnnA',
    depth: 1,
    rights: ['read'],
    objects: [{ kind: 'path', prefix: '/workspace/t-1/src' }],
    predicate: { budget: 0.5, max_calls: 5, max_depth: 1 },
    expires_at: '2026-12-03T07:27:27Z',
    token: TOKEN,
  },
  approved: {
    decision: 'grant',
    reason: null,
    capability_id: 'cap_7NQkKahS19PeFEu8kzDFZw',
    audit_id: 'aud_D-y8cbxpLuDHrCtUsoabIg',
    budget_remaining: 0.4,
    calls_remaining: 4,
  },
  revoked: { revoked: ['cap_cxzI_y_gvZYtYEVnDtXnnA', 'cap_7NQkKahS19PeFEu8kzDFZw'] },
  capability: {
    ...root,
    issued_at: '2026-12-03T07:17:27Z',
    status: 'active',
    revoked_at: null,
    spent: 0.1,
    calls: 1,
    children: ['cap_7NQkKahS19PeFEu8kzDFZw'],
  },
  auditPage: { entries: [entry], next: null },
  trajectories: {
    trajectories: [
      { root_trajectory_id: 't-1', first_at: '2026-12-03T07:17:27.412Z', last_at: '2026-12-03T07:21:40.007Z', grants: 4, denials: 3, calls: 1, spent: 0.1 },
    ],
  },
  verified: { ok: true, entries: 7, trees: 1, checkpoint: { n: 1, size: 7, root: HASH, at: '2026-12-04T18:20:11.412Z' }, uncovered: 0, covered: 7 },
  receipt: {
    audit_id: entry.id,
    row: {
      tenant_id: 'ten_Xa1b2C3d4E5f6G7h8I9j0k',
      tree_id: entry.tree_id,
      seq: entry.seq,
      id: entry.id,
      at: entry.at,
      event: entry.event,
      decision: entry.decision,
      reason_code: null,
      capability_id: entry.capability_id,
      parent_id: entry.parent_id,
      trajectory_id: entry.trajectory_id,
      op: entry.op,
      target: entry.target,
      cost: '100000',
      call_id: entry.call_id,
      detail: entry.detail,
      key_id: entry.key_id,
      request_id: entry.request_id,
      root_trajectory_id: entry.root_trajectory_id,
      prev_hash: PREV,
    },
    hash: HASH,
    leaf_index: 2,
    tree_size: 7,
    checkpoint: TOKEN,
    inclusion: [HASH, PREV],
  },
  createdKey: { ...key, api_key: 'wk.Qm9vX2tleV9p.secret-shown-only-once-AAAAAAAAAAAAAAAAAAAAAAA' },
  keyList: { keys: [key] },
  revokedKey: { ...key, revoked_at: '2026-12-03T09:00:00.000Z', state: 'revoked' },
  jwks: { keys: [{ kty: 'OKP', crv: 'Ed25519', x: '11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo', kid: 'AbCdEfGhIjKlMnOp', alg: 'EdDSA', use: 'sig' }] },
  health: { ok: true },
  openapi: { openapi: '3.1.0', info: { title: 'Warrant', version: '1.0.0' }, paths: {} },

  /** One error of each kind, as its `error` object. */
  errors: {
    invalid_request: {
      code: 'invalid_request',
      message: 'ttl_s: Too small: expected number to be >=1',
      fields: [{ path: 'ttl_s', message: 'Too small: expected number to be >=1' }],
    },
    unauthorized: { code: 'unauthorized', message: 'a valid tenant API key is required (Authorization: Bearer …)' },
    forbidden: { code: 'forbidden', message: 'this API key lacks the role this call needs: one of driver, admin', required_roles: ['driver', 'admin'] },
    attenuation_refused: {
      code: 'attenuation_refused',
      message: 'the child would hold more than its parent: right_widened (rights)',
      violations: [{ component: 'rights', code: 'right_widened', field: 'rights', detail: 'rights: write is not held by the parent' }],
    },
    not_found: { code: 'not_found', message: 'no such capability' },
    idempotency: { code: 'idempotency_conflict', message: 'this idempotency key was used with a different request' },
    not_yet_covered: { code: 'not_yet_covered', message: 'no signed checkpoint covers this entry yet; retry after 10 s', retry_after_s: 10 },
    payload_too_large: { code: 'payload_too_large', message: 'the body must be at most 65536 bytes' },
    unsupported_media_type: { code: 'unsupported_media_type', message: 'the body must be application/json' },
    unavailable: {
      code: 'unavailable',
      message: 'the authority could not reach its database in time; nothing was committed or granted',
      outcome: 'not_committed',
    },
  },
};
