/**
 * The tool registry (issue 17): `PUT /v1/tools/{name}` registers a tool of the tenant (its input
 * schema checked against the five rules, every violation listed), each change a new version; the
 * reads; and the validators of the args of calls by tool, one per immutable version.
 *
 * Each version is sealed (src/service/seal.ts) over all it holds: whoever writes the database could
 * otherwise turn an irreversible tool into a read-only one (no person asked), loosen its schema or
 * move its target, and every call by it would be judged by that. A version whose seal fails is never
 * used nor shown (503); registering the same definition again makes a new, sealed version.
 */
import { z } from '@hono/zod-openapi';
import { ArgsValidator, type ArgError } from '../core/tool-args.js';
import { checkToolSchema, targetProperty, type SchemaFinding } from '../core/tool-schema.js';
import { Right, SideEffect, text } from '../core/schemas.js';
import { unstorableIn } from '../core/storable.js';
import type { Right as RightType, SideEffect as SideEffectType } from '../core/types.js';
import { canonicalJson, newId } from '../crypto/hash.js';
import { Deadline, DEFAULT_DEADLINE_MS, within } from '../store/deadline.js';
import type { Store } from '../store/store.js';
import { findTool, INSERT_TOOL, LATEST_TOOL, latestRegistered, listTools, type ToolRecord } from '../store/tools.js';
import { tenantDraft, type CallerIds, type DecisionWriter } from '../store/writer.js';
import { ApiError, invalidRequest, readAfterCommit, unavailableFrom, type FieldError } from './errors.js';
import type { Reply } from './authority.js';
import { asStored, type ResponseSealer } from './seal.js';

export const TARGET_KINDS = ['path', 'host', 'repo', 'url'] as const;

/** Where a call's target comes from: a JSON pointer (RFC 6901) into the args, and the kind of object it names. */
export const ToolTarget = z.strictObject({
  pointer: z
    .string()
    .min(2)
    .max(256)
    .regex(/^(\/[^/]+)+$/),
  kind: z.enum(TARGET_KINDS),
});

/** The most properties an input schema's top level may hold; the whole schema is bounded by the body's 64 KiB. */
const MAX_SCHEMA_KEYS = 64;

export const PutToolBody = z.strictObject({
  description: text(4096),
  input_schema: z
    .record(z.string().min(1).max(128), z.unknown())
    .refine((s) => Object.keys(s).length <= MAX_SCHEMA_KEYS, `at most ${MAX_SCHEMA_KEYS} keywords`)
    .meta({
      description: 'A JSON Schema (2020-12) for the args, checked against the five rules on every nested schema.',
      maxProperties: MAX_SCHEMA_KEYS,
      propertyNames: { type: 'string', maxLength: 128 },
      'x-checked-by': 'tool-schema-rules',
    }),
  side_effect: SideEffect,
  right: Right,
  target: ToolTarget,
});
export type PutToolBody = z.infer<typeof PutToolBody>;

/** A registered tool as the API shows it. */
export interface ToolDef {
  readonly name: string;
  readonly version: number;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
  readonly sideEffect: SideEffectType;
  readonly right: RightType;
  readonly target: { readonly pointer: string; readonly kind: (typeof TARGET_KINDS)[number] };
}

/** A refusal's entry: a rule's breach (with `rule`), or a target that does not name a required string. */
type ToolViolation = Omit<SchemaFinding, 'rule' | 'code'> & { readonly rule?: SchemaFinding['rule']; readonly code: SchemaFinding['code'] | 'target_invalid' };

/** A tool version's columns (but the seal), as read back by drizzle or raw. */
export interface ToolColumns {
  readonly tenantId: string;
  readonly name: string;
  readonly version: number | string;
  readonly description: string;
  readonly inputSchema: unknown;
  readonly sideEffect: string;
  readonly right: string;
  readonly target: unknown;
  readonly warnings: unknown;
  readonly keyId: string | null;
  readonly createdAt: Date | string;
}

export const toolParts = (r: ToolColumns): unknown[] => [
  r.tenantId,
  r.name,
  Number(r.version),
  r.description,
  r.inputSchema,
  r.sideEffect,
  r.right,
  r.target,
  r.warnings,
  r.keyId,
  new Date(r.createdAt).toISOString(),
];

const unsealed = (): ApiError =>
  new ApiError(
    503,
    'unavailable',
    "the tool's stored definition does not hold its seal (changed in the database, or sealed under a retired signing key): register it again",
    {
      outcome: 'not_committed',
    },
  );

const asDef = (r: ToolRecord): ToolDef => ({
  name: r.name,
  version: r.version,
  description: r.description,
  inputSchema: r.inputSchema as Record<string, unknown>,
  sideEffect: r.sideEffect,
  right: r.right as RightType,
  target: r.target as ToolDef['target'],
});

export function toolBody(r: ToolRecord): Record<string, unknown> {
  return {
    name: r.name,
    version: r.version,
    description: r.description,
    input_schema: r.inputSchema,
    side_effect: r.sideEffect,
    right: r.right,
    target: r.target,
    warnings: r.warnings,
    created_at: r.createdAt.toISOString(),
  };
}

/** Field paths of findings: the schema's pointer under `input_schema`. */
const underSchema = (f: SchemaFinding): ToolViolation => ({ ...f, field: `input_schema${f.field}` });

export class ToolRegistry {
  /**
   * Verified versions by tenant, name and version: the definition and args validator built from a
   * version whose seal held, and that seal. A version never changes, so a row still bearing the same
   * seal is answered from here without computing it again (and a row changed under an unchanged
   * seal is answered with what was verified, not with the change).
   */
  private readonly verified = new Map<string, { readonly seal: string; readonly def: ToolDef; readonly validator: ArgsValidator }>();
  /** The highest version of each tool (tenant, name) known registered: the latest stored may never be below it. */
  private readonly highest = new Map<string, number>();

  constructor(
    private readonly store: Store,
    private readonly writer: DecisionWriter,
    private readonly sealing: () => Promise<ResponseSealer>,
  ) {}

  /** `r`, once its seal is shown to hold (else 503). */
  private async checked(r: ToolRecord): Promise<ToolRecord> {
    if (!(await this.sealing()).holdsOf('tool', toolParts(r), r.seal)) throw unsealed();
    return r;
  }

  /** Registers a tool; a changed definition is a new version (201), an unchanged one is answered as it is (200). */
  async put(tenantId: string, name: string, body: PutToolBody, caller: CallerIds | undefined, deadline: Deadline | undefined): Promise<Reply> {
    // The schema and target are free-form JSON stored in jsonb: text the store refuses is a bad request here.
    const unstorable: FieldError[] = [];
    unstorableIn(body.input_schema, 'input_schema', unstorable);
    unstorableIn(body.target, 'target', unstorable);
    if (unstorable.length > 0) throw invalidRequest(unstorable);
    const report = checkToolSchema(body.input_schema);
    const violations: ToolViolation[] = report.violations.map(underSchema);
    if (report.violations.length === 0 && targetProperty(body.input_schema, body.target.pointer) === null)
      violations.push({
        code: 'target_invalid',
        field: 'target.pointer',
        detail: `target.pointer: ${body.target.pointer} must name a required string property of input_schema`,
      });
    const warnings = report.warnings.map(underSchema);
    if (violations.length > 0) {
      throw new ApiError(422, 'tool_schema_refused', `the tool's schema breaks: ${violations.map((v) => `${v.code} (${v.field})`).join(', ')}`, {
        violations,
        warnings,
      });
    }
    const def = { description: body.description, input_schema: body.input_schema, side_effect: body.side_effect, right: body.right, target: body.target };
    const sealer = await this.sealing();
    let out: { created: boolean; version: number };
    try {
      out = await this.writer.submit<{ created: boolean; version: number }>(
        {
          tenantId,
          fence: null,
          ...(caller === undefined ? {} : { caller }),
          run: async (tx, now) => {
            const [latest] = await tx.query(LATEST_TOOL, [tenantId, name]);
            // An unsealed or broken latest version is registered anew, sealed, even when it reads the same.
            const same =
              latest !== undefined &&
              sealer.holdsOf(
                'tool',
                toolParts({
                  tenantId,
                  name,
                  version: latest.version as number,
                  description: latest.description as string,
                  inputSchema: latest.input_schema,
                  sideEffect: latest.side_effect as string,
                  right: latest.right as string,
                  target: latest.target,
                  warnings: latest.warnings,
                  keyId: latest.key_id as string | null,
                  createdAt: latest.created_at as Date | string,
                }),
                latest.seal as string | null,
              ) &&
              canonicalJson({
                description: latest.description,
                input_schema: latest.input_schema,
                side_effect: latest.side_effect,
                right: latest.right,
                target: latest.target,
              }) === canonicalJson(def);
            if (latest !== undefined && same) return { result: { created: false, version: Number(latest.version) }, audit: null };
            const version = latest === undefined ? 1 : Number(latest.version) + 1;
            const columns: ToolColumns = {
              tenantId,
              name,
              version,
              description: body.description,
              inputSchema: asStored(body.input_schema),
              sideEffect: body.side_effect,
              right: body.right,
              target: asStored(body.target),
              warnings: asStored(warnings),
              keyId: caller?.keyId ?? null,
              createdAt: now,
            };
            await tx.query(INSERT_TOOL, [
              tenantId,
              name,
              String(version),
              body.description,
              JSON.stringify(body.input_schema),
              body.side_effect,
              body.right,
              JSON.stringify(body.target),
              JSON.stringify(warnings),
              caller?.keyId ?? null,
              now.toISOString(),
              sealer.sealOf('tool', toolParts(columns)),
            ]);
            return {
              result: { created: true, version },
              audit: tenantDraft(newId('aud'), 'tool', 'grant', null, {
                tool: name,
                version,
                side_effect: body.side_effect,
                right: body.right,
                target: body.target,
                warnings,
              }),
            };
          },
        },
        deadline,
      );
    } catch (e) {
      if (e instanceof ApiError) throw e;
      throw unavailableFrom(e);
    }
    // Committed (or found registered already): a failure from here on cannot say it changed nothing.
    // Within the request's deadline: a stalled database never answers a read.
    const found = await readAfterCommit(() => within(deadline ?? Deadline.in(DEFAULT_DEADLINE_MS), findTool(this.store.db, tenantId, name, out.version)));
    if (found === null) throw new ApiError(404, 'not_found', 'no such tool');
    return { status: out.created ? 201 : 200, body: toolBody(await this.checked(found)) };
  }

  async get(tenantId: string, name: string, version?: number): Promise<Reply> {
    const r = await findTool(this.store.db, tenantId, name, version);
    if (r === null) throw new ApiError(404, 'not_found', 'no such tool');
    return { status: 200, body: toolBody(await this.checked(r)) };
  }

  async list(tenantId: string): Promise<Reply> {
    const rows = await listTools(this.store.db, tenantId);
    for (const r of rows) await this.checked(r);
    return { status: 200, body: { tools: rows.map(toolBody) } };
  }

  /** The latest version of a tool with its args validator; null when the tenant has none by that name. */
  async resolve(tenantId: string, name: string): Promise<{ def: ToolDef; validator: ArgsValidator } | null> {
    const r = await findTool(this.store.db, tenantId, name);
    if (r === null) return null;
    const named = `${tenantId}\u0000${name}`;
    const key = `${named}\u0000${r.version}`;
    let entry = this.verified.get(key);
    if (entry === undefined || entry.seal !== r.seal) {
      await this.checked(r);
      entry = { seal: r.seal as string, def: asDef(r), validator: new ArgsValidator(r.inputSchema as Record<string, unknown>, unsafeParts(r.inputSchema)) };
      if (this.verified.size >= 1024) this.verified.clear(); // bounded; verified again on demand
      this.verified.set(key, entry);
    }
    // A sealed older version made latest again (the newer ones deleted) would judge calls by the
    // definition they replaced: known from this instance's memory, else from the audit's
    // registration rows, once per tool.
    const high = this.highest.get(named) ?? (await latestRegistered(this.store.db, tenantId, name)) ?? 0;
    if (r.version < high)
      throw new ApiError(
        503,
        'unavailable',
        `tool ${name} is stored at version ${r.version}, but version ${high} was registered: newer versions were removed from the database. Register it again`,
        { outcome: 'not_committed' },
      );
    if (this.highest.size >= 4096) this.highest.clear(); // bounded; read again from the audit on demand
    this.highest.set(named, r.version);
    return { def: entry.def, validator: entry.validator };
  }
}

/**
 * What in a stored schema could stall every call matched against it: a pattern that backtracks
 * catastrophically or a format whose check does. Registration refuses these now; a tool registered
 * before it did (or a row written straight into the database) is refused at each call instead, until
 * it is registered again.
 */
function unsafeParts(schema: unknown): ArgError[] {
  return checkToolSchema(schema)
    .violations.filter((v) => v.code === 'pattern_unsafe' || v.code === 'format_unsafe')
    .map((v) => ({ path: 'args', message: `the tool's schema is refused at input_schema${v.field} (${v.code}): register the tool again` }));
}
