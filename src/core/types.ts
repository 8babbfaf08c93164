/**
 * Types of the capability model C = (R, O, P, E) in canonical form. Raw input becomes these only
 * through the canonicalizers in `objects.ts` and `predicate.ts`; a token becomes a
 * `VerifiedCapability` only through `verifyToken` (src/crypto/tokens.ts).
 */

export const RIGHTS = ['read', 'write', 'execute', 'connect'] as const;
export type Right = (typeof RIGHTS)[number];

declare const canonical: unique symbol;
/** A value that has been through its canonicalizer. */
export type Canonical<T> = T & { readonly [canonical]: true };

export type PathObject = { readonly kind: 'path'; readonly prefix: string };
export type HostObject = { readonly kind: 'host'; readonly name: string; readonly port?: number };
export type RepoObject = { readonly kind: 'repo'; readonly name: string };
export type UrlObject = { readonly kind: 'url'; readonly prefix: string };
export type RawObject = PathObject | HostObject | RepoObject | UrlObject;
export type CanonicalObject = Canonical<RawObject>;

export type PathTarget = { readonly kind: 'path'; readonly path: string };
export type HostTarget = { readonly kind: 'host'; readonly name: string; readonly port?: number };
export type RepoTarget = { readonly kind: 'repo'; readonly name: string };
export type UrlTarget = { readonly kind: 'url'; readonly url: string };
export type RawTarget = PathTarget | HostTarget | RepoTarget | UrlTarget;
export type CanonicalTarget = Canonical<RawTarget>;

export type Scalar = string | number | boolean;

export type ArgBound =
  | { readonly kind: 'max'; readonly arg: string; readonly value: number }
  | { readonly kind: 'min'; readonly arg: string; readonly value: number }
  | { readonly kind: 'one_of'; readonly arg: string; readonly values: readonly Scalar[] }
  | { readonly kind: 'max_length'; readonly arg: string; readonly value: number };

/**
 * A tool's side-effect class (issue 17), least to most dangerous: a destructive call needs a
 * `call_id` so a retry cannot repeat its effect; an irreversible one also needs a person's approval.
 */
export const SIDE_EFFECTS = ['read_only', 'idempotent', 'destructive', 'irreversible'] as const;
export type SideEffect = (typeof SIDE_EFFECTS)[number];

/** The predicate as it travels (API bodies, token claims): costs as decimal numbers. */
export interface RawPredicate {
  readonly max_cost?: number;
  readonly budget?: number;
  readonly max_calls?: number;
  readonly max_depth?: number;
  readonly args?: readonly ArgBound[];
  /** The registered tools this capability covers (issue 17); absent: any tool, and calls by op. */
  readonly tools?: readonly string[];
  /** Side-effect classes whose calls need a person's approval under this capability (irreversible always does). */
  readonly approval_required?: readonly SideEffect[];
}
export type CanonicalPredicate = Canonical<RawPredicate>;

/** The claims a capability token carries (see `src/crypto/tokens.ts` for their JWT names). */
export interface CapabilityClaims {
  readonly id: string;
  readonly tenant: string;
  readonly trajectory: string;
  readonly parent: string | null;
  readonly depth: number;
  readonly rights: readonly Right[];
  readonly objects: readonly CanonicalObject[];
  readonly predicate: CanonicalPredicate;
  /** Issued at, not before and expires, in seconds since the epoch (RFC 7519 NumericDate). */
  readonly iat: number;
  readonly nbf: number;
  readonly exp: number;
}

declare const verified: unique symbol;
/** Claims whose signature has been checked against a known key. */
export type VerifiedCapability = CapabilityClaims & { readonly [verified]: true };

export type Result<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: string };
export const ok = <T>(value: T): Result<T> => ({ ok: true, value });
export const err = <T>(error: string): Result<T> => ({ ok: false, error });

/**
 * Every deny code of `POST /v1/approve` (docs/api.md "Deny codes"), in the order they take
 * precedence. A list, not only a type, so the reference's test reads the real set.
 */
export const DENY_CODES = [
  'bad_token',
  'unknown_key',
  'tenant_mismatch',
  'expired',
  'not_yet_valid',
  'revoked',
  'right_missing',
  'object_outside',
  'cost_exceeds_max',
  'arg_violates_bound',
  'budget_exhausted',
  'calls_exhausted',
  // issue 17: approve by tool
  'unknown_tool',
  'args_invalid',
  'call_id_required',
  'tool_not_allowed',
  'approval_rejected',
  'approval_expired',
] as const;
export type DenyCode = (typeof DENY_CODES)[number];

export interface Deny {
  readonly decision: 'deny';
  readonly code: DenyCode;
  readonly message: string;
}

/** Every attenuation violation code (docs/api.md "Attenuation violation codes"). */
export const VIOLATION_CODES = [
  'right_widened',
  'object_widened',
  'predicate_widened',
  'depth_exhausted',
  'expiry_extended',
  'parent_invalid',
  'parent_expired',
  'parent_revoked',
  'trajectory_unrelated',
] as const;
export type ViolationCode = (typeof VIOLATION_CODES)[number];

/** The part of the request a violation is about. */
export const VIOLATION_COMPONENTS = ['rights', 'objects', 'predicate', 'expiry', 'parent', 'trajectory'] as const;

export interface Violation {
  readonly component: (typeof VIOLATION_COMPONENTS)[number];
  readonly code: ViolationCode;
  /** The request field at fault, as a 400's field paths name it: `predicate.max_calls`, `objects.1`, `ttl_s`, `parent_token`. */
  readonly field: string;
  readonly detail: string;
}
