/**
 * The sandbox driver's side of approve: wrap a tool handler so that it runs only after the
 * authority granted the call. Each call's `call_id` is derived from the logical call (trajectory,
 * turn, the runtime's tool-call id, tool name, arguments), so retrying the same call is a repeat to
 * the authority, which answers it with the first decision and charges nothing again (docs/api.md,
 * "Idempotency and replays").
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { utf8ToBytes } from '@noble/hashes/utils.js';
import { base64url } from 'jose';
import { canonicalJson } from '../crypto/hash.js';
import type { ApproveRequest, Decision, Right, TargetRef } from './index.js';

/** First element of the hashed array: a new derivation gets a new tag (and prefix), never a silent change. */
const CALL_ID_TAG = 'warrant.call_id.v1';
const CALL_ID_PREFIX = 'wc1_';

/** Where a tool call sits in a run: the part of a call's identity the tool's arguments do not carry. */
export interface ToolCallContext {
  readonly trajectoryId: string;
  /** The model turn that asked for the call (a non-negative integer). */
  readonly turn: number;
  /** The runtime's own id for this tool call (e.g. the model API's `tool_use` / `tool_call` id). */
  readonly toolCallId: string;
}

/** One logical tool call: what `callIdOf` hashes. */
export interface LogicalCall extends ToolCallContext {
  readonly tool: string;
  /** The tool's arguments as the model gave them: any JSON value. */
  readonly args: unknown;
}

/**
 * The `call_id` of a logical call: `wc1_` followed by the unpadded base64url SHA-256 of the UTF-8
 * RFC 8785 canonical JSON of `["warrant.call_id.v1", trajectoryId, turn, toolCallId, tool, args]`:
 * 47 characters of `[A-Za-z0-9_-]`, within approve's 1–256. The same call always gives the same
 * id (whatever the order of the args' keys); any difference in any part gives another.
 *
 * @throws TypeError when `turn` is not a non-negative integer, or `args` has no JSON form.
 */
export function callIdOf(call: LogicalCall): string {
  if (!Number.isSafeInteger(call.turn) || call.turn < 0) throw new TypeError('turn must be a non-negative integer');
  let text: string;
  try {
    text = canonicalJson([CALL_ID_TAG, call.trajectoryId, call.turn, call.toolCallId, call.tool, call.args]);
  } catch (e) {
    // canonicalize throws a plain Error for NaN, Infinity, lone surrogates and cycles.
    throw new TypeError('the call has no canonical JSON form', { cause: e });
  }
  return CALL_ID_PREFIX + base64url.encode(sha256(utf8ToBytes(text)));
}

/** Anything that can ask the authority, such as a `WarrantClient`. */
export interface Approver {
  approve(body: ApproveRequest): Promise<Decision>;
}

/** How to ask the authority about one tool's calls. */
export interface ToolGuard<A> {
  /** The tool's name: part of every call_id, so two tools never share one. */
  readonly tool: string;
  /** The capability token to approve with, or how to pick it for a call (e.g. by trajectory). */
  readonly token: string | ((call: ToolCallContext) => string);
  readonly op: Right;
  /** What the call touches, from its arguments. */
  readonly target: (args: A) => TargetRef;
  /** What the call costs against the budget (≥ 0), fixed or from its arguments. */
  readonly cost: number | ((args: A) => number);
  /** The scalar arguments the capability's argument bounds are checked against (approve's `args`); none when omitted. */
  readonly args?: (args: A) => NonNullable<ApproveRequest['args']>;
}

/** What a guarded handler is given besides its arguments: the call and the grant that let it run. */
export interface ToolGrant extends ToolCallContext {
  readonly callId: string;
  /** The grant; `replayed: true` when it answers an earlier attempt of the same call (nothing charged again). */
  readonly decision: Decision;
}

/** The authority did not grant a guarded call: the handler did not run. */
export class ToolDenied extends Error {
  /** The deny reason's code (`right_missing`, `budget_exhausted`, `revoked`, … as docs/api.md lists them). */
  readonly code: string;

  constructor(
    readonly tool: string,
    readonly callId: string,
    /** The authority's answer: `audit_id`, `reason.message`, `replayed`. */
    readonly decision: Decision,
  ) {
    const code = decision.reason?.code ?? decision.decision;
    super(`${tool} was not granted: ${code}`);
    this.name = 'ToolDenied';
    this.code = code;
  }
}

/**
 * Wraps a tool handler so that each call is approved first and the handler runs only on a grant.
 *
 * - A grant runs the handler and returns what it returns.
 * - A deny throws `ToolDenied` (its `code` is the deny code) without running the handler.
 * - Any failure to get an answer (network, `503 unavailable`, `409 in_flight`, a bad API key) throws
 *   the client's `WarrantError` without running the handler. Retrying the same call is safe: its
 *   call_id is the same, so the authority answers the first decision again and charges once.
 *
 * A replayed grant runs the handler again (the authority cannot know whether the first run
 * happened); a handler whose effect must happen once can key it on `grant.callId`.
 *
 * @example
 * const writeFile = guardTool(
 *   warrant,
 *   { tool: 'write_file', token, op: 'write', target: (a: { path: string }) => ({ kind: 'path', path: a.path }), cost: 0 },
 *   async (a) => fs.writeFile(a.path, '…'),
 * );
 * await writeFile({ path: '/workspace/t-1/a' }, { trajectoryId: 't-1', turn: 3, toolCallId: 'toolu_01' });
 */
export function guardTool<A, R>(
  approver: Approver,
  guard: ToolGuard<A>,
  handler: (args: A, grant: ToolGrant) => R | Promise<R>,
): (args: A, call: ToolCallContext) => Promise<R> {
  return async (args, call) => {
    const context = { trajectoryId: call.trajectoryId, turn: call.turn, toolCallId: call.toolCallId };
    const callId = callIdOf({ ...context, tool: guard.tool, args });
    const decision = await approver.approve(approveBody(guard, args, context, callId));
    // Anything but an explicit grant (a deny, or a kind of answer this client does not know) stops here.
    if (decision.decision !== 'grant') throw new ToolDenied(guard.tool, callId, decision);
    return handler(args, { ...context, callId, decision });
  };
}

function approveBody<A>(guard: ToolGuard<A>, args: A, call: ToolCallContext, callId: string): ApproveRequest {
  return {
    token: typeof guard.token === 'string' ? guard.token : guard.token(call),
    op: guard.op,
    target: guard.target(args),
    cost: typeof guard.cost === 'number' ? guard.cost : guard.cost(args),
    call_id: callId,
    ...(guard.args === undefined ? {} : { args: guard.args(args) }),
  };
}
