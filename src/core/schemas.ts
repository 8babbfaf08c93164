/**
 * Closed, bounded zod schemas of the model's wire forms (docs/api.md), shared by request validation,
 * the OpenAPI document and token claims. docs/api.md's five rules ("Conventions"): closed property sets, required fields
 * listed, every string, number and array bounded, units in names, every union tagged by `kind`.
 */
import { z } from 'zod';
import { MAX_COST } from './money.js';
import { storable } from './storable.js';
import { RIGHTS, SIDE_EFFECTS } from './types.js';

/** A bounded string that Postgres can store unchanged: refused at the edge, so nothing reaches the store that it would change or reject. */
export function text(max: number, min = 1): z.ZodString {
  return z.string().min(min).max(max).refine(storable, 'must not contain NUL or unpaired surrogates');
}

export const Id = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_-]+$/);
export const TrajectoryId = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9._:-]+$/);
export const Right = z.enum(RIGHTS);
export const Rights = z.array(Right).min(1).max(RIGHTS.length);
export const Port = z.int().min(1).max(65535);
export const Cost = z.number().min(0).max(MAX_COST);

export const ObjectRef = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('path'), prefix: text(4096) }),
  z.strictObject({ kind: z.literal('host'), name: text(255), port: Port.optional() }),
  z.strictObject({ kind: z.literal('repo'), name: text(400) }),
  z.strictObject({ kind: z.literal('url'), prefix: text(4096) }),
]);
export const Objects = z.array(ObjectRef).min(1).max(64);

export const TargetRef = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('path'), path: text(4096) }),
  z.strictObject({ kind: z.literal('host'), name: text(255), port: Port.optional() }),
  z.strictObject({ kind: z.literal('repo'), name: text(400) }),
  z.strictObject({ kind: z.literal('url'), url: text(8192) }),
]);

const ArgName = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9_.-]+$/);
const ArgNumber = z.number().min(-1e15).max(1e15);
export const Scalar = z.union([text(65536, 0), z.number().min(-Number.MAX_VALUE).max(Number.MAX_VALUE), z.boolean()]);

export const ArgBound = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('max'), arg: ArgName, value: ArgNumber }),
  z.strictObject({ kind: z.literal('min'), arg: ArgName, value: ArgNumber }),
  z.strictObject({
    kind: z.literal('one_of'),
    arg: ArgName,
    values: z
      .array(z.union([text(1024, 0), ArgNumber, z.boolean()]))
      .min(1)
      .max(64),
  }),
  z.strictObject({ kind: z.literal('max_length'), arg: ArgName, value: z.int().min(0).max(65536) }),
]);

/** A registered tool's name (issue 17), as in `PUT /v1/tools/{name}`. */
export const ToolName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_.-]+$/);
export const SideEffect = z.enum(SIDE_EFFECTS);

export const Predicate = z.strictObject({
  max_cost: Cost.optional(),
  budget: Cost.optional(),
  max_calls: z.int().min(0).max(1_000_000_000).optional(),
  max_depth: z.int().min(0).max(32).optional(),
  args: z.array(ArgBound).max(64).optional(),
  tools: z.array(ToolName).max(64).optional().meta({
    description:
      'The registered tools this capability covers (issue 17): a call by op, or by another tool, is denied `tool_not_allowed`. A child may only narrow it.',
  }),
  approval_required: z.array(SideEffect).max(SIDE_EFFECTS.length).optional().meta({
    description:
      "Side-effect classes whose tool calls need a person's approval under this capability (`irreversible` always does). A child may add classes, never drop one.",
  }),
});

const MAX_ARGS = 64;
// A record has no size check of its own, so the refine enforces the bound and `.meta` shows it (and
// the key rule, which the OpenAPI generator drops for records) in the document: @asteasolutions/
// zod-to-openapi reads zod's `.meta` as it reads `.openapi()` metadata.
export const Args = z
  .record(ArgName, Scalar)
  .refine((a) => Object.keys(a).length <= MAX_ARGS, `at most ${MAX_ARGS} arguments`)
  .meta({ maxProperties: MAX_ARGS, propertyNames: z.toJSONSchema(ArgName, { target: 'openapi-3.0' }) });

/** The longest token approve and attenuate accept; mint and attenuate never issue a longer one. */
export const MAX_TOKEN_CHARS = 8192;
/** Token strings are bounded; a valid one is far shorter. */
export const Token = z.string().min(1).max(MAX_TOKEN_CHARS);
export const TtlS = z.int().min(1).max(2_592_000);

export const MintBody = z.strictObject({
  trajectory_id: TrajectoryId,
  rights: Rights,
  objects: Objects,
  predicate: Predicate.optional(),
  ttl_s: TtlS,
});

export const AttenuateBody = z.strictObject({
  parent_token: Token,
  rights: Rights,
  objects: Objects,
  predicate: Predicate.optional(),
  ttl_s: TtlS.optional(),
  trajectory_id: TrajectoryId.optional(),
});

/**
 * A tool call's arguments (issue 17): any JSON object, checked against the tool's registered schema
 * (which itself keeps the five rules) rather than here; bounded by the body's 64 KiB.
 */
export const ToolArgs = z
  .record(ArgName, z.unknown())
  .refine((a) => Object.keys(a).length <= MAX_ARGS, `at most ${MAX_ARGS} arguments`)
  .meta({ maxProperties: MAX_ARGS, propertyNames: z.toJSONSchema(ArgName, { target: 'openapi-3.0' }), 'x-checked-by': 'tool-schema' });

export const ApproveBody = z.strictObject({
  token: Token,
  op: Right.optional().meta({ description: 'The right the call needs; with `target`, for a call by op. Not with `tool`.' }),
  target: TargetRef.optional().meta({ description: 'What the call touches; with `op`. Not with `tool`.' }),
  tool: ToolName.optional().meta({
    description:
      "A registered tool (issue 17): `args` are checked against its schema, and the call's op and target come from its definition. Not with `op`/`target`.",
  }),
  cost: Cost,
  call_id: text(256).optional(),
  args: ToolArgs.optional().meta({
    description: 'For a call by op: at most 64 scalar values (string, number, boolean). For a call by tool: the JSON object its schema describes.',
  }),
  // issue 16: decide and audit without charging
  dry_run: z
    .boolean()
    .optional()
    .meta({
      description:
        'Decide as a real call would and audit it, marked dry_run, but charge nothing: the answer (marked "dry_run": true) gives the ' +
        'budget and calls that would remain after the call. Its call_id is not claimed: a real call with it is decided afresh, and so is a dry run after one.',
    }),
});

export const RevokeBody = z.strictObject({
  capability_id: Id,
  reason: text(512, 0).optional(),
});

export type MintBody = z.infer<typeof MintBody>;
export type AttenuateBody = z.infer<typeof AttenuateBody>;
export type ApproveBody = z.infer<typeof ApproveBody>;
export type RevokeBody = z.infer<typeof RevokeBody>;
