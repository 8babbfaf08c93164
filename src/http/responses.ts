/**
 * The response side of /openapi.json (issue 16): a typed schema for every success and error answer,
 * the error codes as enums per status, and an example on each. Documentation only: the handlers
 * build their bodies from the use cases (src/service), and test/http/openapi-responses.test.ts holds
 * real answers to these schemas, so the two cannot drift apart unnoticed.
 */
import { z } from '@hono/zod-openapi';
import { Id, ObjectRef, Predicate, Right, TargetRef, TrajectoryId } from '../core/schemas.js';
import { DENY_CODES, SIDE_EFFECTS, VIOLATION_CODES, VIOLATION_COMPONENTS } from '../core/types.js';
import { TOOL_SCHEMA_CODES } from '../core/tool-schema.js';
import { ROLES } from '../service/keys.js';
import { EXAMPLES } from './examples.js';

const DateTime = z.string().datetime({ offset: true }).openapi({ example: '2026-12-03T08:17:27Z' });
const Hex = z.string().regex(/^[0-9a-f]{64}$/);
const Jws = z.string().regex(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
const Count = z.int().min(0);

export const DenyCode = z.enum(DENY_CODES).openapi('DenyCode', { description: 'Why approve denied a call (docs/api.md "Deny codes").' });
export const ViolationCode = z.enum(VIOLATION_CODES).openapi('ViolationCode', { description: 'What a refused attenuation would have widened.' });
const Role = z.enum(ROLES).openapi('Role');

const capabilityFields = {
  capability_id: Id,
  trajectory_id: TrajectoryId,
  parent_id: Id.nullable(),
  depth: Count,
  rights: z.array(Right),
  objects: z.array(ObjectRef),
  predicate: Predicate,
  expires_at: DateTime,
};

export const IssuedCapability = z
  .object({ ...capabilityFields, token: z.string().openapi({ description: 'The signed capability (compact JWS); present it to approve and attenuate.' }) })
  .openapi('IssuedCapability');

export const CapabilityView = z
  .object({
    ...capabilityFields,
    issued_at: DateTime,
    status: z.enum(['active', 'expired', 'revoked']),
    revoked_at: DateTime.nullable(),
    spent: z.number().min(0).openapi({ description: 'Cost granted under this capability and its descendants.' }),
    calls: Count,
    children: z.array(Id),
  })
  .openapi('Capability');

const decisionFields = {
  capability_id: Id.nullable().openapi({ description: 'null when the token did not verify as one of this tenant.' }),
  audit_id: Id,
  budget_remaining: z.number().nullable(),
  calls_remaining: Count.nullable(),
  replayed: z.literal(true).optional().openapi({ description: 'Present on the answer to a repeated `call_id`: the first decision, as it was made then.' }),
  decided_at: DateTime.nullable().optional().openapi({ description: 'When a replayed decision was made (null for decisions stored before that was kept).' }),
  dry_run: z
    .literal(true)
    .optional()
    .openapi({ description: 'Present on the answer to `"dry_run": true`: decided and audited, nothing charged; the remaining values are as they would be.' }),
};
const ArgFailure = z.object({ path: z.string(), message: z.string() });
export const DenyReason = z
  .object({
    code: DenyCode,
    message: z.string(),
    fields: z.array(ArgFailure).optional().openapi({ description: '`args_invalid`: every failing argument path (`args.timeout_ms`) and why.' }),
  })
  .openapi('DenyReason');
const toolFields = {
  approval_id: Id.optional().openapi({ description: 'A call that waited for a person (issue 17): its approval.' }),
  approval_required: z.literal(true).optional().openapi({ description: "A dry run of a call by tool that would wait for a person's approval." }),
};
const Grant = z.object({ decision: z.literal('grant'), reason: z.null(), ...decisionFields, ...toolFields }).openapi('Grant');
const Deny = z.object({ decision: z.literal('deny'), reason: DenyReason, ...decisionFields, ...toolFields }).openapi('Deny');
const Pending = z
  .object({
    decision: z.literal('pending'),
    reason: z.null(),
    approval_id: Id,
    expires_at: DateTime.openapi({ description: 'Unresolved by then, the call is denied `approval_expired`.' }),
    capability_id: Id,
    audit_id: Id,
    budget_remaining: z.null(),
    calls_remaining: z.null(),
    replayed: z.literal(true).optional(),
    decided_at: DateTime.nullable().optional(),
  })
  .openapi('Pending', { description: "The call waits for a person's approval; nothing is charged yet." });
export const ApproveResponse = z.discriminatedUnion('decision', [Grant, Deny, Pending]).openapi('ApproveResponse');

// ---- tools and approvals (issue 17) ---------------------------------------------------------------

const SchemaFinding = z.object({
  rule: z.int().min(1).max(5).optional().openapi({ description: 'Which of the five rules (absent for a target that names no required string).' }),
  code: z.enum([...TOOL_SCHEMA_CODES, 'target_invalid']),
  field: z.string().openapi({ description: 'Where: `input_schema` followed by the JSON pointer of the schema at fault, or `target.pointer`.' }),
  detail: z.string(),
});
export const Tool = z
  .object({
    name: z.string(),
    version: z.int().min(1),
    description: z.string(),
    input_schema: z.record(z.string(), z.unknown()),
    side_effect: z.enum(SIDE_EFFECTS),
    right: Right,
    target: z.object({ pointer: z.string(), kind: z.enum(['path', 'host', 'repo', 'url']) }),
    warnings: z.array(SchemaFinding).openapi({ description: 'Rule 4: numeric fields named like durations or sizes without a unit.' }),
    created_at: DateTime,
  })
  .openapi('Tool');
export const ToolList = z.object({ tools: z.array(Tool) }).openapi('ToolList');
export const Approval = z
  .object({
    approval_id: Id,
    state: z.enum(['pending', 'approved', 'rejected', 'expired']),
    tool: z.string(),
    tool_version: z.int().min(1),
    side_effect: z.enum(SIDE_EFFECTS),
    capability_id: Id,
    trajectory_id: TrajectoryId,
    call_id: z.string().nullable(),
    op: Right,
    target: TargetRef,
    args: z.record(z.string(), z.unknown()),
    cost: z.number().min(0),
    requested_by: z
      .string()
      .nullable()
      .openapi({ description: 'The API key id that asked for the call (it may not resolve it: `self_approval`); null for calls asked before it was kept.' }),
    created_at: DateTime,
    expires_at: DateTime,
    resolved_at: DateTime.nullable(),
    resolved_by: z.string().nullable().openapi({ description: 'The API key id that approved or rejected it; null while pending or when it expired.' }),
    note: z.string().nullable(),
    outcome: z.union([Grant, Deny]).nullable().openapi({
      description:
        "The call's decision once resolved: granted (charged then, once) or denied (`approval_rejected`, `approval_expired`, or as approve would deny it now).",
    }),
  })
  .openapi('Approval');
export const ApprovalList = z.object({ approvals: z.array(Approval) }).openapi('ApprovalList');

export const RevokeResponse = z
  .object({ revoked: z.array(Id).openapi({ description: 'The capability and every descendant revoked by this call.' }) })
  .openapi('RevokeResponse');

const AuditEvent = z.enum(['mint', 'attenuate', 'approve', 'revoke', 'access', 'approval', 'tool']);
const ReasonCode = z.enum([...DENY_CODES, ...VIOLATION_CODES, 'forbidden', 'self_approval']).openapi('ReasonCode');
const auditFields = {
  id: Id,
  at: DateTime,
  event: AuditEvent,
  decision: z.enum(['grant', 'deny', 'pending']),
  reason_code: ReasonCode.nullable(),
  capability_id: Id.nullable(),
  parent_id: Id.nullable(),
  trajectory_id: TrajectoryId.nullable(),
  op: Right.nullable(),
  target: TargetRef.nullable(),
  call_id: z.string().nullable(),
  detail: z
    .record(z.string(), z.unknown())
    .nullable()
    .openapi({ description: "The decision's particulars (violations, the requested target, a deny message)." }),
};
export const AuditEntry = z
  .object({
    ...auditFields,
    pos: Count,
    tree_id: z.string(),
    seq: Count,
    cost: z.number().min(0).nullable(),
    key_id: z.string().nullable(),
    request_id: z.string().nullable(),
    root_trajectory_id: TrajectoryId.nullable(),
    hash: Hex,
    prev_hash: Hex,
  })
  .openapi('AuditEntry');
export const AuditPage = z
  .object({
    entries: z.array(AuditEntry),
    next: z.string().regex(/^\d+$/).nullable().openapi({ description: 'The `after` of the next page; null at the end.' }),
  })
  .openapi('AuditPage');

export const TrajectoryList = z
  .object({
    trajectories: z.array(
      z.object({
        root_trajectory_id: TrajectoryId,
        first_at: DateTime,
        last_at: DateTime,
        grants: Count,
        denials: Count,
        calls: Count,
        spent: z.number().min(0),
      }),
    ),
  })
  .openapi('TrajectoryList');

const Checkpoint = z.object({ n: z.int().min(1), size: Count, root: Hex, at: DateTime });
const VerifyOk = z
  .object({
    ok: z.literal(true),
    entries: Count,
    trees: Count,
    checkpoint: Checkpoint.nullable(),
    uncovered: Count,
    covered: Count,
    oldest_uncovered_at: DateTime.nullable(),
  })
  .openapi('AuditVerified');
const VerifyFailed = z
  .object({ ok: z.literal(false), entries: Count, first_bad_id: Id.optional(), first_bad_checkpoint: z.int().min(1).optional(), reason: z.string() })
  .openapi('AuditVerifyFailed');
export const VerifyResponse = z.union([VerifyOk, VerifyFailed]).openapi('AuditVerifyReport');

/** Exactly the fields a row's hash covers (src/store/audit.ts hashedFields): `cost` in micro-units, as a decimal string. */
const HashedRow = z
  .object({
    ...auditFields,
    tenant_id: Id,
    tree_id: z.string().optional(),
    seq: Count,
    cost: z.string().regex(/^\d+$/).nullable(),
    key_id: z.string().optional(),
    request_id: z.string().optional(),
    root_trajectory_id: TrajectoryId.optional(),
    prev_hash: Hex,
  })
  .openapi('HashedAuditRow');
export const Receipt = z
  .object({
    audit_id: Id,
    row: HashedRow,
    hash: Hex,
    leaf_index: Count,
    tree_size: z.int().min(1),
    checkpoint: Jws.openapi({ description: 'The signed checkpoint (compact JWS) the proof leads to.' }),
    inclusion: z.array(Hex).openapi({ description: 'RFC 9162 inclusion proof, leaf to root.' }),
  })
  .openapi('Receipt');

const keyFields = {
  key_id: z.string().length(12),
  name: z.string(),
  roles: z.array(Role),
  created_at: DateTime,
  expires_at: DateTime.nullable(),
  revoked_at: DateTime.nullable(),
  created_by: z
    .string()
    .length(12)
    .nullable()
    .openapi({ description: 'The key that made it over the API (revoking that key revokes this one); null: made by the operator.' }),
  state: z.enum(['active', 'expired', 'revoked']),
};
export const ApiKey = z.object(keyFields).openapi('ApiKey');
export const CreatedApiKey = z
  .object({ ...keyFields, api_key: z.string().openapi({ description: 'The key itself, shown only in this answer.' }) })
  .openapi('CreatedApiKey');
export const ApiKeyList = z.object({ keys: z.array(ApiKey) }).openapi('ApiKeyList');
export const RevokedApiKey = z
  .object({
    ...keyFields,
    revoked_with_it: z
      .array(z.string().length(12))
      .openapi({ description: 'The keys made from it over the API (and from those, and so on) that this revocation revoked too.' }),
  })
  .openapi('RevokedApiKey');

const PublicJwk = z.object({
  kty: z.literal('OKP'),
  crv: z.literal('Ed25519'),
  x: z.string(),
  kid: z.string(),
  alg: z.literal('EdDSA'),
  use: z.literal('sig'),
});
export const Jwks = z.object({ keys: z.array(PublicJwk) }).openapi('JwkSet');
export const Health = z.object({ ok: z.literal(true) }).openapi('Health');
export const OpenApiDocument = z
  .looseObject({ openapi: z.string(), info: z.record(z.string(), z.unknown()), paths: z.record(z.string(), z.unknown()) })
  .openapi('OpenApiDocument');

// ---- errors -------------------------------------------------------------------------------------

const FieldError = z.object({ path: z.string(), message: z.string() });
/** One kind of error: its codes and the fields beside `code` and `message`. */
function errorKind<C extends string>(name: string, codes: [C, ...C[]], extra: z.ZodRawShape = {}) {
  return z.object({ code: z.enum(codes), message: z.string(), ...extra }).openapi(name);
}
const ERROR_KINDS = {
  invalid_request: errorKind('InvalidRequest', ['invalid_request'], { fields: z.array(FieldError).openapi({ description: 'Each failing field path.' }) }),
  unauthorized: errorKind('Unauthorized', ['unauthorized']),
  forbidden: errorKind('Forbidden', ['forbidden'], { required_roles: z.array(Role) }),
  self_approval: errorKind('SelfApproval', ['self_approval']),
  attenuation_refused: errorKind('AttenuationRefused', ['attenuation_refused'], {
    violations: z
      .array(
        z.object({
          component: z.enum(VIOLATION_COMPONENTS),
          code: ViolationCode,
          field: z
            .string()
            .openapi({ description: 'The request field at fault: `rights`, `objects.<i>`, `predicate.<name>`, `ttl_s`, `parent_token`, `trajectory_id`.' }),
          detail: z.string(),
        }),
      )
      .min(1),
  }),
  not_found: errorKind('NotFound', ['not_found']),
  idempotency: errorKind('IdempotencyConflict', ['idempotency_conflict', 'in_flight']),
  approval_resolved: errorKind('ApprovalResolved', ['approval_resolved'], { state: z.enum(['approved', 'rejected', 'expired']) }),
  tool_schema_refused: errorKind('ToolSchemaRefused', ['tool_schema_refused'], {
    violations: z.array(SchemaFinding).min(1),
    warnings: z.array(SchemaFinding),
  }),
  not_yet_covered: errorKind('NotYetCovered', ['not_yet_covered'], { retry_after_s: z.int().min(1) }),
  payload_too_large: errorKind('PayloadTooLarge', ['payload_too_large']),
  unsupported_media_type: errorKind('UnsupportedMediaType', ['unsupported_media_type']),
  unavailable: errorKind('Unavailable', ['unavailable'], {
    outcome: z.enum(['not_committed', 'unknown']).openapi({
      description: '`not_committed`: nothing changed, repeat freely; `unknown`: repeat with the same call_id / Idempotency-Key to learn the outcome.',
    }),
  }),
};
type ErrorKind = keyof typeof ERROR_KINDS;

const DESCRIPTIONS: Record<number, string> = {
  400: 'invalid input, naming each failing field',
  401: 'no valid API key',
  403: 'refused',
  404: 'not found',
  409: 'conflict',
  413: 'body over 64 KiB',
  415: 'body not application/json',
  422: 'a tool schema that breaks the five rules: every violation listed',
  503: 'unavailable: fails closed, nothing granted',
};

const headersOf = (status: number, kinds: readonly ErrorKind[]) => {
  if (status === 401) return { headers: z.object({ 'WWW-Authenticate': z.literal('Bearer') }) };
  if (kinds.includes('not_yet_covered')) return { headers: z.object({ 'Retry-After': z.string().regex(/^\d+$/).openapi({ description: 'Seconds' }) }) };
  return {};
};

/** The error responses of a route: per status, `{"error": ...}` with the codes that status can carry there. */
function errors(byStatus: Record<number, readonly ErrorKind[]>) {
  return Object.fromEntries(
    Object.entries(byStatus).map(([s, kinds]) => {
      const [first, ...rest] = kinds.map((k) => ERROR_KINDS[k]) as unknown as [z.ZodObject, ...z.ZodObject[]];
      const error = rest.length === 0 ? first : z.discriminatedUnion('code', [first, ...rest]);
      const example = { error: EXAMPLES.errors[kinds[0] as ErrorKind] };
      return [
        s,
        {
          description: DESCRIPTIONS[Number(s)] ?? `error ${s}`,
          ...headersOf(Number(s), kinds),
          content: { 'application/json': { schema: z.object({ error }), example } },
        },
      ];
    }),
  );
}

const ok = (schema: z.ZodType, description: string, example: unknown) => ({ description, content: { 'application/json': { schema, example } } });

// Every /v1 call can meet these: no key, a key without the role (audited), or a database that cannot answer in time.
const V1 = { 401: ['unauthorized'], 403: ['forbidden'], 503: ['unavailable'] } as const;
const POST = { ...V1, 400: ['invalid_request'], 413: ['payload_too_large'], 415: ['unsupported_media_type'] } as const;
const PARAM = { ...V1, 400: ['invalid_request'] } as const;

/** The documented responses of each /v1 operation. */
export const RESPONSES = {
  mint: { 201: ok(IssuedCapability, 'the capability and its token', EXAMPLES.issued), ...errors({ ...POST, 409: ['idempotency'] }) },
  attenuate: {
    201: ok(IssuedCapability, 'the child capability and its token', EXAMPLES.attenuated),
    ...errors({ ...POST, 403: ['attenuation_refused', 'forbidden'], 409: ['idempotency'] }),
  },
  approve: { 200: ok(ApproveResponse, 'grant or deny, with its audit id', EXAMPLES.approved), ...errors({ ...POST, 409: ['idempotency'] }) },
  revoke: { 200: ok(RevokeResponse, 'the ids revoked', EXAMPLES.revoked), ...errors({ ...POST, 404: ['not_found'] }) },
  get: { 200: ok(CapabilityView, 'the capability', EXAMPLES.capability), ...errors({ ...PARAM, 404: ['not_found'] }) },
  audit: { 200: ok(AuditPage, 'entries and the next cursor', EXAMPLES.auditPage), ...errors(PARAM) },
  trajectories: { 200: ok(TrajectoryList, 'the trees, most recently active first', EXAMPLES.trajectories), ...errors(PARAM) },
  verify: { 200: ok(VerifyResponse, 'ok with the coverage, or the first bad row or checkpoint', EXAMPLES.verified), ...errors(V1) },
  receipt: { 200: ok(Receipt, 'the receipt', EXAMPLES.receipt), ...errors({ ...PARAM, 404: ['not_found'], 409: ['not_yet_covered'] }) },
  createKey: { 201: ok(CreatedApiKey, 'the key, with its secret this once', EXAMPLES.createdKey), ...errors(POST) },
  listKeys: { 200: ok(ApiKeyList, 'the keys', EXAMPLES.keyList), ...errors(V1) },
  revokeKey: { 200: ok(RevokedApiKey, 'the revoked key, and the keys revoked with it', EXAMPLES.revokedKey), ...errors({ ...PARAM, 404: ['not_found'] }) },
  putTool: {
    200: ok(Tool, 'unchanged: the current version', EXAMPLES.tool),
    201: ok(Tool, 'a new version', EXAMPLES.tool),
    ...errors({ ...POST, 422: ['tool_schema_refused'] }),
  },
  listTools: { 200: ok(ToolList, 'the latest version of each tool', { tools: [EXAMPLES.tool] }), ...errors(V1) },
  getTool: { 200: ok(Tool, 'the tool', EXAMPLES.tool), ...errors({ ...PARAM, 404: ['not_found'] }) },
  listApprovals: { 200: ok(ApprovalList, 'the approvals in that state', { approvals: [EXAMPLES.approval] }), ...errors(PARAM) },
  getApproval: { 200: ok(Approval, 'the approval', EXAMPLES.approval), ...errors({ ...PARAM, 404: ['not_found'] }) },
  resolveApproval: {
    200: ok(Approval, 'the approval, resolved', EXAMPLES.approval),
    ...errors({ ...POST, 403: ['forbidden', 'self_approval'], 404: ['not_found'], 409: ['approval_resolved'] }),
  },
};

/** A route without a key: documented here, served by a plain handler in app.ts. */
export interface KeylessRoute {
  readonly path: string;
  readonly operationId: string;
  readonly summary: string;
  readonly responses: Record<number, unknown>;
}

/** The routes served without a key, given the path of the audit keys. */
export function keylessRoutes(auditKeysPath: string): KeylessRoute[] {
  return [
    {
      path: '/.well-known/jwks.json',
      operationId: 'getJwks',
      summary: 'Public verification keys (JWKS)',
      responses: { 200: ok(Jwks, 'the keys', EXAMPLES.jwks) },
    },
    {
      path: auditKeysPath,
      operationId: 'getAuditKeys',
      summary: 'Audit checkpoint public keys (JWKS)',
      responses: { 200: ok(Jwks, 'the keys', EXAMPLES.jwks) },
    },
    { path: '/openapi.json', operationId: 'getOpenApi', summary: 'This document', responses: { 200: ok(OpenApiDocument, 'OpenAPI 3.1', EXAMPLES.openapi) } },
    { path: '/healthz', operationId: 'getHealth', summary: 'Liveness', responses: { 200: ok(Health, 'alive', EXAMPLES.health) } },
    {
      path: '/readyz',
      operationId: 'getReadiness',
      summary: 'Readiness: 503 while decisions cannot commit (database unreachable, stalled or read-only); answers within 1 s',
      responses: { 200: ok(Health, 'ready', EXAMPLES.health), ...errors({ 503: ['unavailable'] }) },
    },
  ];
}
