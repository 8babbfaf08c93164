/**
 * The Hono app: the routes of docs/api.md, bearer auth, body rules (JSON only, 64 KiB), error mapping and
 * the OpenAPI document generated from the same zod schemas that validate. Built by `createApp`
 * from injected store, writer, keys and clock: no globals, so it runs on Node and Workers alike.
 */
import { OpenAPIHono, createRoute, z, type RouteConfig } from '@hono/zod-openapi';
import type { Context, MiddlewareHandler, Next } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { HTTPException } from 'hono/http-exception';
import type { ZodError } from 'zod';
import { ApproveBody, AttenuateBody, Id, MintBody, RevokeBody, text, ToolName, TrajectoryId } from '../core/schemas.js';
import type { KeyRing } from '../crypto/keys.js';
import { Deadline, DEFAULT_DEADLINE_MS, within } from '../store/deadline.js';
import { ReadinessProbe } from '../store/readiness.js';
import type { Store } from '../store/store.js';
import { DEFAULT_MAX_PENDING, type DecisionWriter } from '../store/writer.js';
import { Authority, type Reply, type RequestContext } from '../service/authority.js';
import { Reads } from '../service/reads.js';
import { ApiError, invalidRequest, unavailable, unavailableFrom, type FieldError } from '../service/errors.js';
import { newId } from '../crypto/hash.js';
import { Authenticator, KEY_CACHE_TTL_MS, KeyReadsBusy } from '../service/tenants.js';
import { forbidden } from '../service/access.js';
import { hasRole, rolesFor, routeOf, type Role } from '../service/keys.js';
import { CreateKeyBody, KeyAdmin, KeyId } from '../service/key-admin.js';
import type { CallerIds } from '../store/writer.js';
import type { Metrics } from './metrics.js';
import { addDocs, type DocsAssets } from './docs.js';
import { addUi } from './ui.js';
import { refusedKey } from './body-keys.js';
import { DEFAULT_TRAJECTORIES, MAX_TRAJECTORIES, trajectoriesReply } from '../service/trajectories.js';
import { keylessRoutes, RESPONSES } from './responses.js';
import { EXAMPLES } from './examples.js';
import { PutToolBody } from '../service/tools.js';
import { MAX_WAIT_S } from '../service/approvals.js';

export interface AppDeps {
  readonly store: Store;
  readonly writer: DecisionWriter;
  readonly keys: KeyRing;
  /** The audit checkpoint key ring: its public keys are published, and check checkpoints in verify. */
  readonly auditKeys?: KeyRing;
  /** Seconds between checkpoint rounds (a receipt's retry hint). */
  readonly checkpointIntervalS?: number;
  readonly now: () => Date;
  /** Structured log sink; never given tokens or keys. */
  readonly log?: (entry: Record<string, unknown>) => void;
  /** When given, decisions and latencies are counted and served at GET /metrics. */
  readonly metrics?: Metrics;
  /** Every /v1 request is answered within this many ms (503 `unavailable` past it); default 2000. */
  readonly deadlineMs?: number;
  /** Most decision requests (mint, attenuate, approve, revoke) pending at once; beyond it, 503 at once. */
  readonly maxPending?: number;
  /**
   * Subscribes the API-key cache to revocations made anywhere (the notice `revokeKeyIn` sends): `forget`
   * gets the revoked key's id, or null when notices may have been missed (drop every cached key).
   * Without it, a key revoked elsewhere is accepted here until its cache entry expires (30 s).
   */
  readonly keyRevocations?: (forget: (keyId: string | null) => void) => void;
  /** Swagger UI's files for GET /docs (the Node entry reads them from swagger-ui-dist); without them there is no /docs. */
  readonly docsAssets?: DocsAssets;
}

type Env = { Variables: { tenantId: string; requestId: string; keyId: string; keyRoles: readonly Role[]; keyExpiresAt: Date | null; deadline: Deadline } };

export const MAX_BODY_BYTES = 64 * 1024;
/** Where the audit checkpoint keys are published, without auth. */
export const AUDIT_KEYS_PATH = '/.well-known/warrant-audit-keys.json';
/** Verifying a whole chain reads every row of the tenant: bounded, but not by a decision's deadline. */
const VERIFY_BOUND_MS = 30_000;

function fieldErrors(error: ZodError, prefix: string): FieldError[] {
  const out: FieldError[] = [];
  for (const issue of error.issues) {
    const path = [prefix, ...issue.path.map(String)].filter((p) => p !== '').join('.');
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) out.push({ path: path === '' ? key : `${path}.${key}`, message: 'unknown field' });
    } else {
      out.push({ path: path === '' ? prefix || 'body' : path, message: issue.message });
    }
  }
  return out;
}

const IdemHeaders = z.object({ 'idempotency-key': z.string().min(1).max(128).optional() });
const body = <T extends z.ZodType>(schema: T, example: unknown) => ({ required: true as const, content: { 'application/json': { schema, example } } });

const AuditQuery = z.strictObject({
  trajectory_id: TrajectoryId.optional(),
  /** Every row of the trees rooted at this trajectory: a trajectory's view with its subagents' rows. */
  root_trajectory_id: TrajectoryId.optional(),
  capability_id: Id.optional(),
  decision: z.enum(['grant', 'deny', 'pending']).optional(),
  event: z.enum(['mint', 'attenuate', 'approve', 'revoke', 'access', 'approval', 'tool']).optional(),
  after: z.string().min(1).max(19).regex(/^\d+$/).optional(),
  limit: z.coerce.number().int().min(1).max(1000).optional(),
});

/** An approver's answer to a call waiting for a person (issue 17). */
const ResolveBody = z.strictObject({ decision: z.enum(['approve', 'reject']), note: text(1024, 0).optional() });

const routes = {
  mint: createRoute({
    method: 'post',
    path: '/v1/capabilities',
    operationId: 'mintCapability',
    tags: ['capabilities'],
    summary: 'Mint a root capability',
    request: { headers: IdemHeaders, body: body(MintBody, EXAMPLES.mint) },
    responses: RESPONSES.mint,
  }),
  attenuate: createRoute({
    method: 'post',
    path: '/v1/attenuate',
    operationId: 'attenuateCapability',
    tags: ['capabilities'],
    summary: 'Issue a child capability',
    description:
      "Each predicate field the request omits takes the parent's bound (`max_depth`: one less than the parent's; `args`: the parent's list, when omitted as a whole), " +
      "as an omitted `ttl_s` takes the parent's remaining lifetime; the answer and the token carry the effective bounds. A field given looser than the parent's is refused: " +
      '403 `attenuation_refused` lists every violation with its `component`, `code`, the request `field` at fault (`predicate.max_calls`, `objects.1`, `ttl_s`, `parent_token`) and a `detail` naming it.',
    request: { headers: IdemHeaders, body: body(AttenuateBody, EXAMPLES.attenuate) },
    responses: RESPONSES.attenuate,
  }),
  approve: createRoute({
    method: 'post',
    path: '/v1/approve',
    operationId: 'approve',
    tags: ['decisions'],
    summary: 'May this call run?',
    description:
      'With a `call_id`, a repeat (same token, op, target, cost and args) returns the first decision as it was made then, even if the capability ' +
      'was revoked, expired or spent since: marked `"replayed": true` with `decided_at`, charging nothing and writing no audit row. ' +
      'Other values under the same `call_id` are 409 `idempotency_conflict`. ' +
      'With `"dry_run": true` the call is decided and audited (its row\'s detail marked `dry_run`) but nothing is charged and its `call_id` is not claimed; ' +
      'the answer, marked `"dry_run": true`, gives the budget and calls that would remain after it.',
    request: { body: body(ApproveBody, EXAMPLES.approve) },
    responses: RESPONSES.approve,
  }),
  revoke: createRoute({
    method: 'post',
    path: '/v1/revoke',
    operationId: 'revokeCapability',
    tags: ['capabilities'],
    summary: 'Revoke a capability and its descendants',
    request: { body: body(RevokeBody, EXAMPLES.revoke) },
    responses: RESPONSES.revoke,
  }),
  get: createRoute({
    method: 'get',
    path: '/v1/capabilities/{id}',
    operationId: 'getCapability',
    tags: ['capabilities'],
    summary: 'A stored capability',
    request: { params: z.strictObject({ id: Id }) },
    responses: RESPONSES.get,
  }),
  audit: createRoute({
    method: 'get',
    path: '/v1/audit',
    operationId: 'listAudit',
    tags: ['audit'],
    summary: 'Audit entries, oldest first',
    request: { query: AuditQuery },
    responses: RESPONSES.audit,
  }),
  createKey: createRoute({
    method: 'post',
    path: '/v1/api-keys',
    operationId: 'createApiKey',
    tags: ['api keys'],
    summary: 'Create an API key of the tenant (admin)',
    description: 'The key is in `api_key`, shown only in this answer; only its hash is stored.',
    request: { body: body(CreateKeyBody, EXAMPLES.createKey) },
    responses: RESPONSES.createKey,
  }),
  listKeys: createRoute({
    method: 'get',
    path: '/v1/api-keys',
    operationId: 'listApiKeys',
    tags: ['api keys'],
    summary: "The tenant's API keys, without secrets (admin)",
    responses: RESPONSES.listKeys,
  }),
  revokeKey: createRoute({
    method: 'delete',
    path: '/v1/api-keys/{id}',
    operationId: 'revokeApiKey',
    tags: ['api keys'],
    summary: 'Revoke an API key (admin)',
    description: `Refused at once by this instance; other instances may accept it for up to ${KEY_CACHE_TTL_MS / 1000} s (their key cache).`,
    request: { params: z.strictObject({ id: KeyId }) },
    responses: RESPONSES.revokeKey,
  }),
  putTool: createRoute({
    method: 'put',
    path: '/v1/tools/{name}',
    operationId: 'putTool',
    tags: ['tools'],
    summary: 'Register a tool of the tenant, or a new version of it (admin)',
    description:
      'The input schema must keep rules 1, 2, 3 and 5 on every nested schema (closed objects, every property required or given a default, every type bounded, ' +
      'unions of objects tagged): otherwise 422 `tool_schema_refused` lists every violation. Rule 4 (units in names) comes back as `warnings`. ' +
      'A changed definition is a new version (201); the same one again changes nothing (200).',
    request: { params: z.strictObject({ name: ToolName }), body: body(PutToolBody, EXAMPLES.putTool) },
    responses: RESPONSES.putTool,
  }),
  listTools: createRoute({
    method: 'get',
    path: '/v1/tools',
    operationId: 'listTools',
    tags: ['tools'],
    summary: "The latest version of each of the tenant's tools",
    responses: RESPONSES.listTools,
  }),
  getTool: createRoute({
    method: 'get',
    path: '/v1/tools/{name}',
    operationId: 'getTool',
    tags: ['tools'],
    summary: 'A tool: its latest version, or the one asked for',
    request: { params: z.strictObject({ name: ToolName }), query: z.strictObject({ version: z.coerce.number().int().min(1).max(1_000_000).optional() }) },
    responses: RESPONSES.getTool,
  }),
  listApprovals: createRoute({
    method: 'get',
    path: '/v1/approvals',
    operationId: 'listApprovals',
    tags: ['approvals'],
    summary: 'Calls waiting for a person (or approved, rejected, expired), the longest waiting first',
    request: {
      query: z.strictObject({
        state: z.enum(['pending', 'approved', 'rejected', 'expired']).optional(),
        limit: z.coerce.number().int().min(1).max(500).optional(),
      }),
    },
    responses: RESPONSES.listApprovals,
  }),
  getApproval: createRoute({
    method: 'get',
    path: '/v1/approvals/{id}',
    operationId: 'getApproval',
    tags: ['approvals'],
    summary: 'An approval, with the outcome of its call once resolved',
    description: `With \`wait_s\` (at most ${MAX_WAIT_S}), the answer waits until the approval is resolved or expires, or that many seconds pass (a bounded long-poll).`,
    request: { params: z.strictObject({ id: Id }), query: z.strictObject({ wait_s: z.coerce.number().int().min(0).max(MAX_WAIT_S).optional() }) },
    responses: RESPONSES.getApproval,
  }),
  resolveApproval: createRoute({
    method: 'post',
    path: '/v1/approvals/{id}',
    operationId: 'resolveApproval',
    tags: ['approvals'],
    summary: 'Approve or reject a call waiting for a person (approver, admin)',
    description:
      'Approving decides the call as approve would now and charges it, in the transaction that writes its audit row, once. ' +
      'The same resolution again answers the approval as it stands; the other one, or any after it expired, is 409 `approval_resolved`. ' +
      'The API key that asked for the call may not resolve it: 403 `self_approval` (audited).',
    request: { params: z.strictObject({ id: Id }), body: body(ResolveBody, EXAMPLES.resolve) },
    responses: RESPONSES.resolveApproval,
  }),
  // The operator's page: recent trajectories.
  trajectories: createRoute({
    method: 'get',
    path: '/v1/audit/trajectories',
    operationId: 'listTrajectories',
    tags: ['audit'],
    summary: 'Recently active delegation trees, with their grants, denials, calls and spend',
    request: { query: z.strictObject({ limit: z.coerce.number().int().min(1).max(MAX_TRAJECTORIES).optional() }) },
    responses: RESPONSES.trajectories,
  }),
  verify: createRoute({
    method: 'get',
    path: '/v1/audit/verify',
    operationId: 'verifyAudit',
    tags: ['audit'],
    summary: "Check the tenant's audit rows, chains and signed checkpoints",
    responses: RESPONSES.verify,
  }),
  receipt: createRoute({
    method: 'get',
    path: '/v1/audit/{id}/receipt',
    operationId: 'getAuditReceipt',
    tags: ['audit'],
    summary: 'An audit entry with the proof that a signed checkpoint includes it',
    request: { params: z.strictObject({ id: Id }) },
    responses: RESPONSES.receipt,
  }),
};

/** The key and request behind a call, for its audit row. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any route's context
const callerOf = (c: Context<Env, any, any>): CallerIds => ({ keyId: c.get('keyId'), requestId: c.get('requestId') });
/** Who asks and by when, for a decision. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any route's context
const contextOf = (c: Context<Env, any, any>): RequestContext => ({ caller: callerOf(c), deadline: c.get('deadline') });

/** Parses the body (hono caches its text for the validators) and refuses malformed JSON, `__proto__` and repeated keys. */
async function parseBody(c: Context, next: Next): Promise<void> {
  let text: string;
  let body: unknown;
  try {
    text = await c.req.text();
    body = JSON.parse(text);
  } catch (e) {
    if (e instanceof ApiError) throw e;
    throw invalidRequest([{ path: 'body', message: 'malformed JSON' }]);
  }
  const refused = refusedKey(text, body);
  if (refused !== undefined) throw invalidRequest([refused]);
  await next();
}

/** Content type, size and JSON syntax of a POST body, each with its own error code. */
const jsonBody: MiddlewareHandler = async (c, next) => {
  if (c.req.method !== 'POST' && c.req.method !== 'PUT') return next();
  const type = c.req.header('content-type') ?? '';
  if (!/^application\/json\s*(;|$)/i.test(type)) throw new ApiError(415, 'unsupported_media_type', 'the body must be application/json');
  // With a Content-Length (and no chunked encoding) the size is known up front: deciding on it here
  // spares the Node adapter from building a streaming Request for every call (bodyLimit touches the
  // stream). Bodies without one are counted as they stream.
  const length = c.req.header('content-length');
  if (length !== undefined && c.req.header('transfer-encoding') === undefined) {
    if (!/^\d{1,10}$/.test(length) || Number(length) > MAX_BODY_BYTES) throw tooLarge();
    return parseBody(c, next);
  }
  return bodyLimit({
    maxSize: MAX_BODY_BYTES,
    onError: () => {
      throw tooLarge();
    },
  })(c, () => parseBody(c, next));
};

const tooLarge = (): ApiError => new ApiError(413, 'payload_too_large', `the body must be at most ${MAX_BODY_BYTES} bytes`);

export function createApp(deps: AppDeps): OpenAPIHono<Env> {
  const authority = new Authority(deps);
  const reads = new Reads(deps.store, deps.now, {
    ...(deps.auditKeys === undefined ? {} : { auditKeys: deps.auditKeys }),
    ...(deps.checkpointIntervalS === undefined ? {} : { checkpointIntervalS: deps.checkpointIntervalS }),
  });
  const auth = new Authenticator(deps.store, () => deps.now().getTime());
  deps.keyRevocations?.((keyId) => (keyId === null ? auth.forgetAll() : auth.forget(keyId)));
  const readiness = new ReadinessProbe(() => deps.store.canCommit());
  // Load shedding counts whole decision requests, not only the writer's queue: during a stall they
  // pile up as much on their idempotency claims as on the writer.
  let decisionsPending = 0;
  const maxPending = deps.maxPending ?? DEFAULT_MAX_PENDING;
  if (deps.metrics !== undefined) {
    deps.metrics.pendingDecisions = () => decisionsPending;
    deps.metrics.longPolls = () => authority.approvals.waiting;
  }
  /** Runs a decision request, or refuses it at once (503, nothing committed) when too many are pending. */
  const admitted = async (decide: () => Promise<Reply>): Promise<Reply> => {
    if (decisionsPending >= maxPending) {
      deps.metrics?.shed();
      throw unavailable();
    }
    decisionsPending += 1;
    try {
      return await decide();
    } finally {
      decisionsPending -= 1;
    }
  };
  /** A read bounded by the request's deadline: past it, 503 (a read changes nothing: not committed). */
  const bounded = async (c: Context<Env>, read: Promise<Reply>, deadline = c.get('deadline')): Promise<Reply> => {
    try {
      return await within(deadline, read);
    } catch (e) {
      if (e instanceof ApiError) throw e;
      throw unavailable();
    }
  };
  const keyAdmin = new KeyAdmin(deps.store, authority, auth, deps.now);
  const app = new OpenAPIHono<Env>({
    defaultHook: (result, c) => {
      if (!result.success) {
        const prefix = result.target === 'json' ? '' : result.target;
        const e = invalidRequest(fieldErrors(result.error, prefix));
        return c.json(e.toBody(), 400);
      }
      return undefined;
    },
  });
  // Statuses come from the use cases (docs/api.md); the route types cannot follow them, hence `never`.
  const send = (c: Context, r: Reply): never => c.json(r.body as object, r.status as 200) as never;
  /** Counts a decision answer (mint/attenuate 201 or 403, approve grant/deny, revoke 200). */
  const counted = (event: string, r: Reply): Reply => {
    if (deps.metrics === undefined) return r;
    const body = r.body as { decision?: 'grant' | 'deny'; reason?: { code: string } | null; error?: { code: string }; dry_run?: boolean };
    // A dry run (issue 16) is counted apart: it grants nothing, so it must not swell the grants.
    if (body.decision !== undefined) deps.metrics.decision(body.dry_run === true ? `${event}_dry_run` : event, body.decision, body.reason?.code ?? null);
    else if (r.status === 403) deps.metrics.decision(event, 'deny', body.error?.code ?? null);
    else if (r.status < 300) deps.metrics.decision(event, 'grant', null);
    return r;
  };

  // Every answer carries a request id (the caller's X-Request-Id when well formed) for the logs.
  app.use('*', async (c, next) => {
    const started = performance.now();
    const given = c.req.header('x-request-id');
    const requestId = given !== undefined && /^[A-Za-z0-9._-]{1,64}$/.test(given) ? given : newId('req');
    c.set('requestId', requestId);
    // Set before the answer exists: a header added to a finished answer makes hono rebuild it from
    // its body stream, which cost more than the rest of this middleware (bench/RESULTS.md).
    c.header('X-Request-Id', requestId);
    await next();
    const seconds = (performance.now() - started) / 1000;
    deps.metrics?.request(c.req.method, c.req.routePath, c.res.status, seconds);
    // The route pattern, never the raw path or query (they may carry ids); never a header or body.
    deps.log?.({
      msg: 'request',
      request_id: requestId,
      method: c.req.method,
      route: c.req.routePath,
      status: c.res.status,
      ms: Math.round(seconds * 10_000) / 10,
    });
  });

  app.onError((e, c) => {
    // Counted here, whatever waited (auth, a claim, a read or the writer): one count per answer.
    if (e instanceof ApiError && e.status === 503 && c.get('deadline')?.hasPassed() === true)
      deps.metrics?.deadlineExceeded(e.extra.outcome === 'unknown' ? 'unknown' : 'not_committed');
    if (e instanceof ApiError) return c.json(e.toBody(), e.status);
    if (e instanceof HTTPException && e.status === 415)
      return c.json(new ApiError(415, 'unsupported_media_type', 'the body must be application/json').toBody(), 415);
    if (e instanceof HTTPException && e.status < 500) return c.json(new ApiError(400, 'invalid_request', e.message).toBody(), 400);
    deps.log?.({
      level: 'error',
      msg: 'request failed',
      request_id: c.get('requestId'),
      route: c.req.routePath,
      error: e instanceof Error ? e.name : 'unknown',
    });
    return c.json(unavailable().toBody(), 503);
  });
  app.notFound((c) => c.json(new ApiError(404, 'not_found', 'no such route').toBody(), 404));

  app.use('/v1/*', async (c, next) => {
    c.header('Cache-Control', 'no-store');
    // The request's deadline starts now: every wait on the database below is bounded by it.
    const deadline = Deadline.in(deps.deadlineMs ?? DEFAULT_DEADLINE_MS);
    c.set('deadline', deadline);
    // RFC 7235: the auth scheme is case-insensitive.
    const m = /^Bearer +(\S+)$/i.exec(c.req.header('authorization') ?? '');
    let principal;
    try {
      principal = m === null ? null : await within(deadline, auth.authenticate(m[1] as string, deadline));
    } catch (e) {
      if (e instanceof KeyReadsBusy) deps.metrics?.keyReadsShed();
      throw unavailable();
    }
    if (principal === null) {
      c.header('WWW-Authenticate', 'Bearer');
      throw new ApiError(401, 'unauthorized', 'a valid tenant API key is required (Authorization: Bearer …)');
    }
    c.set('tenantId', principal.tenantId);
    c.set('keyId', principal.keyId);
    c.set('keyExpiresAt', principal.expiresAt);
    c.set('keyRoles', principal.roles);
    // Roles are checked before the body is read: a call outside them runs nothing but its audit row.
    const route = routeOf(c.req.method, c.req.path);
    const needed = rolesFor(route);
    if (!hasRole(principal, needed)) {
      let refusal: ApiError;
      try {
        refusal = await forbidden(deps.writer, principal.tenantId, callerOf(c), route, needed, deadline);
      } catch (e) {
        throw unavailableFrom(e);
      }
      throw refusal;
    }
    await next();
  });
  app.use('/v1/*', jsonBody);

  app.openapi(routes.mint, async (c) =>
    send(
      c,
      counted('mint', await admitted(() => authority.mint(c.get('tenantId'), c.req.valid('json'), c.req.valid('header')['idempotency-key'], contextOf(c)))),
    ),
  );
  app.openapi(routes.attenuate, async (c) =>
    send(
      c,
      counted(
        'attenuate',
        await admitted(() => authority.attenuate(c.get('tenantId'), c.req.valid('json'), c.req.valid('header')['idempotency-key'], contextOf(c))),
      ),
    ),
  );
  app.openapi(routes.approve, async (c) =>
    send(c, counted('approve', await admitted(() => authority.approve(c.get('tenantId'), c.req.valid('json'), contextOf(c))))),
  );
  app.openapi(routes.revoke, async (c) =>
    send(c, counted('revoke', await admitted(() => authority.revoke(c.get('tenantId'), c.req.valid('json'), contextOf(c))))),
  );
  // issue 17: tools and approvals.
  app.openapi(routes.putTool, async (c) =>
    send(c, await authority.tools.put(c.get('tenantId'), c.req.valid('param').name, c.req.valid('json'), callerOf(c), c.get('deadline'))),
  );
  app.openapi(routes.listTools, async (c) => send(c, await bounded(c, authority.tools.list(c.get('tenantId')))));
  app.openapi(routes.getTool, async (c) =>
    send(c, await bounded(c, authority.tools.get(c.get('tenantId'), c.req.valid('param').name, c.req.valid('query').version))),
  );
  app.openapi(routes.listApprovals, async (c) => {
    const q = c.req.valid('query');
    return send(c, await bounded(c, authority.approvals.list(c.get('tenantId'), q.state ?? 'pending', q.limit ?? 100)));
  });
  app.openapi(routes.getApproval, async (c) => {
    const waitS = c.req.valid('query').wait_s ?? 0;
    // A long-poll is bounded by its wait, not by a decision's deadline. Not wrapped in `bounded`:
    // reading an approval past its time expires it, a decision whose outcome the view itself reports.
    const deadline = Deadline.in(waitS * 1000 + (deps.deadlineMs ?? DEFAULT_DEADLINE_MS));
    return send(
      c,
      await authority.approvals.view(c.get('tenantId'), c.req.valid('param').id, waitS, {
        signal: c.req.raw.signal,
        viewer: { keyId: c.get('keyId'), roles: c.get('keyRoles') },
        deadline,
      }),
    );
  });
  app.openapi(routes.resolveApproval, async (c) =>
    send(c, await admitted(() => authority.approvals.resolve(c.get('tenantId'), c.req.valid('param').id, c.req.valid('json'), callerOf(c), c.get('deadline')))),
  );
  app.openapi(routes.createKey, async (c) =>
    send(c, await admitted(() => keyAdmin.create(c.get('tenantId'), c.req.valid('json'), c.get('keyExpiresAt'), contextOf(c)))),
  );
  app.openapi(routes.listKeys, async (c) => send(c, await bounded(c, keyAdmin.list(c.get('tenantId'), deps.now()))));
  app.openapi(routes.revokeKey, async (c) => send(c, await admitted(() => keyAdmin.revoke(c.get('tenantId'), c.req.valid('param').id, contextOf(c)))));
  app.openapi(routes.get, async (c) => send(c, await bounded(c, reads.capability(c.get('tenantId'), c.req.valid('param').id))));
  app.openapi(routes.audit, async (c) => {
    const q = c.req.valid('query');
    return send(
      c,
      await bounded(
        c,
        reads.audit(c.get('tenantId'), {
          trajectoryId: q.trajectory_id,
          rootTrajectoryId: q.root_trajectory_id,
          capabilityId: q.capability_id,
          decision: q.decision,
          event: q.event,
          afterPos: q.after === undefined ? undefined : Number(q.after),
          limit: q.limit ?? 100,
        }),
      ),
    );
  });
  // The operator's page opens on this summary.
  app.openapi(routes.trajectories, async (c) =>
    send(c, await bounded(c, trajectoriesReply(deps.store, c.get('tenantId'), c.req.valid('query').limit ?? DEFAULT_TRAJECTORIES))),
  );
  app.openapi(routes.verify, async (c) =>
    send(c, await bounded(c, reads.verifyAudit(c.get('tenantId')), Deadline.in(Math.max(VERIFY_BOUND_MS, deps.deadlineMs ?? 0)))),
  );
  app.openapi(routes.receipt, async (c) => {
    try {
      return send(c, await bounded(c, reads.receipt(c.get('tenantId'), c.req.valid('param').id)));
    } catch (e) {
      if (e instanceof ApiError && e.code === 'not_yet_covered') c.header('Retry-After', String(e.extra.retry_after_s));
      throw e;
    }
  });

  app.get('/.well-known/jwks.json', (c) => {
    c.header('Cache-Control', 'public, max-age=300');
    return c.json(deps.keys.jwks);
  });
  // The audit checkpoint keys (RFC 7517 JWK set): with them alone, anyone can check checkpoints and receipts.
  const auditKeys = deps.auditKeys;
  if (auditKeys !== undefined) {
    app.get(AUDIT_KEYS_PATH, (c) => {
      c.header('Cache-Control', 'public, max-age=300');
      return c.json(auditKeys.jwks);
    });
  }
  // An interactive reference over the same document, its assets served from here (docs.ts).
  addDocs(app, deps.docsAssets);
  addUi(app); // the operator's page (ui.ts)
  app.get('/healthz', (c) => c.json({ ok: true }));
  const metrics = deps.metrics;
  if (metrics !== undefined) app.get('/metrics', async (c) => c.text(await metrics.render(), 200, { 'Content-Type': 'text/plain; version=0.0.4' }));
  // Within 1 s, always: 503 while the database is unreachable, stalled or read-only (docs/api.md "GET /readyz").
  app.get('/readyz', async (c) => {
    const ready = await readiness.isReady();
    deps.metrics?.database(ready ? 'available' : 'unavailable');
    return ready ? c.json({ ok: true }) : c.json(unavailable().toBody(), 503);
  });
  app.openAPIRegistry.registerComponent('securitySchemes', 'tenantKey', { type: 'http', scheme: 'bearer' });
  // The keyless routes are plain handlers above; listed here so the document covers every route of docs/api.md.
  for (const route of keylessRoutes(AUDIT_KEYS_PATH)) {
    app.openAPIRegistry.registerPath({ method: 'get', tags: ['public'], security: [], ...route } as RouteConfig);
  }
  app.doc31('/openapi.json', {
    openapi: '3.1.0',
    info: { title: 'Warrant', version: '1.0.0', description: 'Capability authority for AI-agent runtimes (reference: docs/api.md).' },
    security: [{ tenantKey: [] }],
  });
  return app;
}

export type { KeyRing };
