/**
 * A typed client of the Warrant HTTP API (docs/api.md) for runtimes, subagent spawners and sandbox
 * drivers, on anything with `fetch` (Node, Workers, browsers). Request types are the server's own
 * zod schemas; every error answer becomes a `WarrantError` with its stable `code`. Tokens can also
 * be checked offline against the authority's `/.well-known/jwks.json` (signature and expiry only:
 * revocation and budgets are known to `/v1/approve` alone; offline.ts), and a sandbox driver can
 * wrap a tool handler so that it runs only on a grant (guard.ts).
 */
import type { JSONWebKeySet } from 'jose';
import type { z } from 'zod';
import type { ApproveBody, AttenuateBody, MintBody, RevokeBody } from '../core/schemas.js';
import type { ArgBound, Right, RawObject, RawPredicate, RawTarget } from '../core/types.js';
import type { Receipt, ReceiptCheck } from '../audit/receipt.js';

export { verifyOffline, type OfflineClaims, type OfflineCode, type OfflineResult } from './offline.js';
export { fromMcpTool, sideEffectOf, type McpTool, type SideEffectClass, type ToolRegistration } from './mcp.js';
import type { SideEffectClass, ToolRegistration } from './mcp.js';
export { callIdOf, guardTool, ToolDenied, type Approver, type LogicalCall, type ToolCallContext, type ToolGrant, type ToolGuard } from './guard.js';

export type MintRequest = z.input<typeof MintBody>;
export type AttenuateRequest = z.input<typeof AttenuateBody>;
export type ApproveRequest = z.input<typeof ApproveBody>;
export type RevokeRequest = z.input<typeof RevokeBody>;
export type { ArgBound, RawObject as ObjectRef, RawPredicate as Predicate, RawTarget as TargetRef, Right };

export interface Capability {
  readonly capability_id: string;
  readonly token: string;
  readonly trajectory_id: string;
  readonly parent_id: string | null;
  readonly depth: number;
  readonly rights: Right[];
  readonly objects: RawObject[];
  readonly predicate: RawPredicate;
  readonly expires_at: string;
}

export interface Decision {
  /** `pending`: a call by tool waiting for a person's approval (issue 17); nothing is charged yet. */
  readonly decision: 'grant' | 'deny' | 'pending';
  readonly reason: { readonly code: string; readonly message: string; readonly fields?: { path: string; message: string }[] } | null;
  readonly capability_id: string | null;
  readonly audit_id: string;
  readonly budget_remaining: number | null;
  readonly calls_remaining: number | null;
  /** Set on the answer to a repeated `call_id`: the first decision, charging nothing again. */
  readonly replayed?: true;
  /** When a replayed decision was first made (null for decisions stored before this was kept). */
  readonly decided_at?: string | null;
  /** Present on the answer to `dry_run: true`: decided and audited, nothing charged (the remaining values are as they would be). */
  readonly dry_run?: true;
  /** A call that waited for a person: its approval (`GET /v1/approvals/{id}`). */
  readonly approval_id?: string;
  /** On `pending`: unresolved by then, the call is denied `approval_expired`. */
  readonly expires_at?: string;
  /** A dry run of a call that would wait for a person's approval. */
  readonly approval_required?: true;
}

/** A registered tool (issue 17). */
export interface Tool extends ToolRegistration {
  readonly name: string;
  readonly version: number;
  readonly warnings: { rule?: number; code: string; field: string; detail: string }[];
  readonly created_at: string;
}

/** A call by tool waiting for (or resolved by) a person. */
export interface Approval {
  readonly approval_id: string;
  readonly state: 'pending' | 'approved' | 'rejected' | 'expired';
  readonly tool: string;
  readonly tool_version: number;
  readonly side_effect: SideEffectClass;
  readonly capability_id: string;
  readonly trajectory_id: string;
  readonly call_id: string | null;
  readonly op: Right;
  readonly target: RawTarget;
  readonly args: Record<string, unknown>;
  readonly cost: number;
  /** The API key id that asked for the call: it may not resolve it (403 `self_approval`). */
  readonly requested_by: string | null;
  readonly created_at: string;
  readonly expires_at: string;
  readonly resolved_at: string | null;
  readonly resolved_by: string | null;
  readonly note: string | null;
  /** The call's decision once resolved (grant or deny). */
  readonly outcome: Decision | null;
}

export interface StoredCapability extends Omit<Capability, 'token'> {
  readonly status: 'active' | 'expired' | 'revoked';
  readonly spent: number;
  readonly calls: number;
  readonly children: string[];
}

export interface AuditEntry {
  readonly id: string;
  readonly at: string;
  readonly event: 'mint' | 'attenuate' | 'approve' | 'revoke' | 'access';
  readonly decision: 'grant' | 'deny';
  readonly reason_code: string | null;
  readonly capability_id: string | null;
  readonly parent_id: string | null;
  readonly trajectory_id: string | null;
  readonly op: string | null;
  readonly target: unknown;
  readonly cost: number | null;
  readonly call_id: string | null;
  readonly detail: unknown;
  readonly hash: string;
  readonly prev_hash: string;
}

export interface AuditQuery {
  readonly trajectory_id?: string;
  readonly capability_id?: string;
  readonly decision?: 'grant' | 'deny';
  readonly event?: AuditEntry['event'];
  readonly after?: string;
  readonly limit?: number;
}

export type AuditVerification =
  | {
      readonly ok: true;
      readonly entries: number;
      readonly trees: number;
      readonly checkpoint: { readonly n: number; readonly size: number; readonly root: string; readonly at: string } | null;
      readonly covered: number;
      readonly uncovered: number;
      /** When the oldest uncovered row was decided, or null when every row is covered. */
      readonly oldest_uncovered_at: string | null;
    }
  | { readonly ok: false; readonly entries: number; readonly first_bad_id?: string; readonly first_bad_checkpoint?: number; readonly reason: string };

export type { Receipt, ReceiptCheck };

/** An error answer of the authority (docs/api.md "Errors"), or `network` when none came. */
export class WarrantError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** attenuation_refused: every violation; invalid_request: the failing fields. */
    readonly details: Readonly<Record<string, unknown>> = {},
  ) {
    super(message);
    this.name = 'WarrantError';
  }
}

export interface ClientOptions {
  /** e.g. `http://127.0.0.1:8080` */
  readonly baseUrl: string;
  /** The tenant's API key (`wk.…`); sent only as a bearer credential. */
  readonly apiKey: string;
  readonly fetch?: typeof fetch;
}

export class WarrantClient {
  private readonly base: string;
  private readonly doFetch: typeof fetch;

  constructor(private readonly options: ClientOptions) {
    this.base = options.baseUrl.replace(/\/+$/, '');
    this.doFetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  /** Mints a root capability for a trajectory. */
  mint(body: MintRequest, options: { idempotencyKey?: string } = {}): Promise<Capability> {
    return this.send('POST', '/v1/capabilities', body, options.idempotencyKey);
  }

  /** Issues a child capability; a refusal throws `attenuation_refused` with `details.violations`. */
  attenuate(body: AttenuateRequest, options: { idempotencyKey?: string } = {}): Promise<Capability> {
    return this.send('POST', '/v1/attenuate', body, options.idempotencyKey);
  }

  /** May this call run? A denial is an answer (`decision: 'deny'`), not an error. */
  approve(body: ApproveRequest): Promise<Decision> {
    return this.send('POST', '/v1/approve', body);
  }

  /** Revokes a capability and every descendant not already revoked; returns the ids revoked now. */
  async revoke(body: RevokeRequest): Promise<string[]> {
    return (await this.send<{ revoked: string[] }>('POST', '/v1/revoke', body)).revoked;
  }

  capability(id: string): Promise<StoredCapability> {
    return this.send('GET', `/v1/capabilities/${encodeURIComponent(id)}`);
  }

  audit(query: AuditQuery = {}): Promise<{ entries: AuditEntry[]; next: string | null }> {
    const q = new URLSearchParams(Object.entries(query).flatMap(([k, v]) => (v === undefined ? [] : [[k, String(v)]])));
    const suffix = q.size > 0 ? `?${q.toString()}` : '';
    return this.send('GET', `/v1/audit${suffix}`);
  }

  verifyAudit(): Promise<AuditVerification> {
    return this.send('GET', '/v1/audit/verify');
  }

  /** A receipt for an audit entry (a `WarrantError` with code `not_yet_covered` until a checkpoint covers it). */
  receipt(auditId: string): Promise<Receipt> {
    return this.send('GET', `/v1/audit/${encodeURIComponent(auditId)}/receipt`);
  }

  /** Registers a tool (admin); a refused schema throws `tool_schema_refused` with `details.violations`. */
  putTool(name: string, registration: ToolRegistration): Promise<Tool> {
    return this.send('PUT', `/v1/tools/${encodeURIComponent(name)}`, registration);
  }

  async tools(): Promise<Tool[]> {
    return (await this.send<{ tools: Tool[] }>('GET', '/v1/tools')).tools;
  }

  tool(name: string, version?: number): Promise<Tool> {
    return this.send('GET', `/v1/tools/${encodeURIComponent(name)}${version === undefined ? '' : `?version=${version}`}`);
  }

  async approvals(state: Approval['state'] = 'pending'): Promise<Approval[]> {
    return (await this.send<{ approvals: Approval[] }>('GET', `/v1/approvals?state=${state}`)).approvals;
  }

  /** An approval; with `waitS` (≤ 30), held while pending until it is resolved or expires, or the wait ends. */
  approval(id: string, options: { waitS?: number } = {}): Promise<Approval> {
    return this.send('GET', `/v1/approvals/${encodeURIComponent(id)}${options.waitS === undefined ? '' : `?wait_s=${options.waitS}`}`);
  }

  /** Approves or rejects a pending call (approver or admin key). */
  resolveApproval(id: string, decision: 'approve' | 'reject', note?: string): Promise<Approval> {
    return this.send('POST', `/v1/approvals/${encodeURIComponent(id)}`, { decision, ...(note === undefined ? {} : { note }) });
  }

  private async send<T>(method: 'GET' | 'POST' | 'PUT', path: string, body?: unknown, idempotencyKey?: string): Promise<T> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.options.apiKey}`, accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (idempotencyKey !== undefined) headers['idempotency-key'] = idempotencyKey;
    let res: Response;
    try {
      res = await this.doFetch(`${this.base}${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    } catch (e) {
      throw new WarrantError(0, 'network', `the authority at ${this.base} could not be reached (${networkCause(e)})`);
    }
    const json = (await res.json().catch(() => null)) as unknown;
    if (res.ok) return json as T;
    const error = (json as { error?: { code?: unknown; message?: unknown } } | null)?.error;
    const { code, message, ...details } = (error ?? {}) as Record<string, unknown>;
    throw new WarrantError(res.status, typeof code === 'string' ? code : 'unknown', typeof message === 'string' ? message : `HTTP ${res.status}`, details);
  }
}

/** Why a fetch failed in the socket's words (ECONNREFUSED, ENOTFOUND, …): undici only says "fetch failed". */
function networkCause(e: unknown): string {
  const cause = (e as { cause?: { code?: unknown; message?: unknown } } | null)?.cause;
  if (typeof cause?.code === 'string') return cause.code;
  if (typeof cause?.message === 'string') return cause.message;
  return e instanceof Error ? e.message : String(e);
}

/**
 * Verifies a receipt offline against the authority's audit keys (a JWK set, or the URL of
 * `/.well-known/warrant-audit-keys.json`, fetched once per call): the row hashes to its hash, the
 * checkpoint is signed by an audit key, and the inclusion proof leads from the row to its root.
 */
export async function verifyReceipt(receipt: unknown, auditKeys: URL | JSONWebKeySet): Promise<ReceiptCheck> {
  // Loaded on first use: the receipt code brings zod and the hashing libraries, which a client that
  // only mints and approves (or the CLI, once per call) need not load.
  const [{ importAuditKeys }, { verifyReceipt: verifyWithKeys }] = await Promise.all([import('../audit/checkpoint.js'), import('../audit/receipt.js')]);
  const set = auditKeys instanceof URL ? ((await (await fetch(auditKeys)).json()) as unknown) : auditKeys;
  return verifyWithKeys(receipt, await importAuditKeys(set));
}
