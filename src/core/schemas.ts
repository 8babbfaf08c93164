/**
 * Closed, bounded zod schemas of the model's wire forms (docs/api.md), shared by request validation,
 * the OpenAPI document and token claims. docs/api.md's five rules ("Conventions"): closed property sets, required fields
 * listed, every string, number and array bounded, units in names, every union tagged by `kind`.
 */
import { z } from 'zod';
import { MAX_COST } from './money.js';
import { RIGHTS } from './types.js';

// Postgres text and jsonb cannot hold NUL, and a lone surrogate has no UTF-8 form: refuse both
// at the edge, so nothing reaches the store that it would change or reject.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const storable = (s: string): boolean => !s.includes('\0') && !LONE_SURROGATE.test(s);

/** A bounded string that Postgres can store unchanged. */
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

export const Predicate = z.strictObject({
  max_cost: Cost.optional(),
  budget: Cost.optional(),
  max_calls: z.int().min(0).max(1_000_000_000).optional(),
  max_depth: z.int().min(0).max(32).optional(),
  args: z.array(ArgBound).max(64).optional(),
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

export const ApproveBody = z.strictObject({
  token: Token,
  op: Right,
  target: TargetRef,
  cost: Cost,
  call_id: text(256).optional(),
  args: Args.optional(),
});

export const RevokeBody = z.strictObject({
  capability_id: Id,
  reason: text(512, 0).optional(),
});

export type MintBody = z.infer<typeof MintBody>;
export type AttenuateBody = z.infer<typeof AttenuateBody>;
export type ApproveBody = z.infer<typeof ApproveBody>;
export type RevokeBody = z.infer<typeof RevokeBody>;
