/**
 * guardTool and callIdOf (src/client/guard.ts) against the real server process: a grant runs the
 * handler once, a deny or a failure to get an answer never runs it, the same logical call keeps its
 * call_id so the authority replays the first decision, and the call_id derivation is pinned by a
 * vector computed here with node:crypto.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ApproveBody } from '../../src/core/schemas.js';
import { callIdOf, guardTool, ToolDenied, WarrantClient, WarrantError, type ToolCallContext, type ToolGrant } from '../../src/client/index.js';
import { cleanupServers, seedDataDir, startServer, tempDir, type RunningServer } from '../support/server.js';

interface WriteArgs {
  readonly path: string;
  readonly bytes: number;
}

describe('guardTool against the real server', () => {
  let server: RunningServer;
  let client: WarrantClient;
  let token: string;
  let capabilityId: string;
  beforeAll(async () => {
    const dataDir = join(tempDir(), 'data');
    await seedDataDir(dataDir);
    server = await startServer({ dataDir });
    client = new WarrantClient({ baseUrl: server.url, apiKey: server.apiKey });
    const cap = await client.mint({
      trajectory_id: 'g-1',
      rights: ['write'],
      objects: [{ kind: 'path', prefix: '/workspace/g-1' }],
      predicate: { budget: 100, args: [{ kind: 'max', arg: 'bytes', value: 1000 }] },
      ttl_s: 600,
    });
    ({ token, capability_id: capabilityId } = cap);
  });
  afterAll(cleanupServers);

  /** A write_file tool whose handler records each run; cost is a thousandth of the bytes written. */
  function writeFile(approver: WarrantClient = client): { run: (args: WriteArgs, call: ToolCallContext) => Promise<string>; runs: ToolGrant[] } {
    const runs: ToolGrant[] = [];
    const run = guardTool(
      approver,
      {
        tool: 'write_file',
        token,
        op: 'write',
        target: (a: WriteArgs) => ({ kind: 'path', path: a.path }),
        cost: (a) => a.bytes / 1000,
        args: (a) => ({ bytes: a.bytes }),
      },
      async (a, grant) => {
        runs.push(grant);
        return `wrote ${a.bytes} bytes to ${a.path}`;
      },
    );
    return { run, runs };
  }

  const approvals = async (callId: string): Promise<{ decision: string; reason_code: string | null }[]> => {
    const { entries } = await client.audit({ capability_id: capabilityId, event: 'approve', limit: 1000 });
    return entries.filter((e) => e.call_id === callId);
  };
  const spent = async (): Promise<number> => (await client.capability(capabilityId)).spent;

  test('a grant runs the handler once, and its decision is in the audit', async () => {
    const tool = writeFile();
    const call = { trajectoryId: 'g-1', turn: 1, toolCallId: 'toolu_grant' };
    const before = await spent();
    expect(await tool.run({ path: '/workspace/g-1/a.txt', bytes: 500 }, call)).toBe('wrote 500 bytes to /workspace/g-1/a.txt');
    expect(tool.runs).toHaveLength(1);
    const grant = tool.runs[0]!;
    expect(grant).toMatchObject({ ...call, decision: { decision: 'grant', capability_id: capabilityId } });
    expect(grant.decision.replayed).toBeUndefined();
    expect(grant.callId).toBe(callIdOf({ ...call, tool: 'write_file', args: { path: '/workspace/g-1/a.txt', bytes: 500 } }));
    expect(await approvals(grant.callId)).toMatchObject([{ decision: 'grant', reason_code: null }]);
    expect(await spent()).toBeCloseTo(before + 0.5, 9);
  });

  test.each([
    ['object_outside', { path: '/etc/passwd', bytes: 1 }],
    ['arg_violates_bound', { path: '/workspace/g-1/big', bytes: 5000 }],
  ])('a deny (%s) throws ToolDenied with its code and never runs the handler', async (code, args) => {
    const tool = writeFile();
    const call = { trajectoryId: 'g-1', turn: 2, toolCallId: `toolu_${code}` };
    const denied = await tool.run(args, call).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(ToolDenied);
    expect(denied).toMatchObject({ code, tool: 'write_file', callId: callIdOf({ ...call, tool: 'write_file', args }), decision: { decision: 'deny' } });
    expect(tool.runs).toEqual([]);
    expect(await approvals((denied as ToolDenied).callId)).toMatchObject([{ decision: 'deny', reason_code: code }]);
  });

  test('an unreachable authority, or an error answer, never runs the handler', async () => {
    const call = { trajectoryId: 'g-1', turn: 3, toolCallId: 'toolu_fail' };
    const args = { path: '/workspace/g-1/b.txt', bytes: 1 };
    const unreachable = writeFile(new WarrantClient({ baseUrl: 'http://127.0.0.1:1', apiKey: server.apiKey }));
    await expect(unreachable.run(args, call)).rejects.toMatchObject({ status: 0, code: 'network' });
    const refused = writeFile(new WarrantClient({ baseUrl: server.url, apiKey: 'wk.not-a-key' }));
    const e = await refused.run(args, call).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(WarrantError);
    expect(e).toMatchObject({ status: 401, code: 'unauthorized' });
    expect([...unreachable.runs, ...refused.runs]).toEqual([]);
  });

  test('the same logical call twice keeps its call_id: the second answer is the first decision, replayed, charged once', async () => {
    const tool = writeFile();
    const call = { trajectoryId: 'g-1', turn: 4, toolCallId: 'toolu_retry' };
    const before = await spent();
    await tool.run({ path: '/workspace/g-1/c.txt', bytes: 200 }, call);
    // A retry: the same call, its arguments' keys in another order.
    await tool.run({ bytes: 200, path: '/workspace/g-1/c.txt' }, call);
    const [first, second] = tool.runs as [ToolGrant, ToolGrant];
    expect(second.callId).toBe(first.callId);
    expect(first.decision.replayed).toBeUndefined();
    expect(second.decision).toMatchObject({ decision: 'grant', replayed: true, audit_id: first.decision.audit_id });
    expect(await approvals(first.callId)).toHaveLength(1);
    expect(await spent()).toBeCloseTo(before + 0.2, 9);

    // A denied call retried is denied again, from the record.
    const outside = { path: '/workspace/other', bytes: 1 };
    const retry = { trajectoryId: 'g-1', turn: 4, toolCallId: 'toolu_retry_deny' };
    const d1 = (await tool.run(outside, retry).catch((e: unknown) => e)) as ToolDenied;
    const d2 = (await tool.run(outside, retry).catch((e: unknown) => e)) as ToolDenied;
    expect(d2).toBeInstanceOf(ToolDenied);
    expect(d2).toMatchObject({ code: 'object_outside', callId: d1.callId, decision: { replayed: true, audit_id: d1.decision.audit_id } });
    expect(tool.runs).toHaveLength(2);
  });

  test('another argument, turn or tool-call id is another call, decided afresh', async () => {
    const tool = writeFile();
    const call = { trajectoryId: 'g-1', turn: 5, toolCallId: 'toolu_a' };
    await tool.run({ path: '/workspace/g-1/d.txt', bytes: 1 }, call);
    await tool.run({ path: '/workspace/g-1/d.txt', bytes: 2 }, call);
    await tool.run({ path: '/workspace/g-1/d.txt', bytes: 1 }, { ...call, turn: 6 });
    await tool.run({ path: '/workspace/g-1/d.txt', bytes: 1 }, { ...call, toolCallId: 'toolu_b' });
    const ids = tool.runs.map((r) => r.callId);
    expect(new Set(ids).size).toBe(4);
    expect(tool.runs.map((r) => r.decision.replayed)).toEqual([undefined, undefined, undefined, undefined]);
    for (const id of ids) expect(await approvals(id)).toHaveLength(1);
  });
});

function cyclic(): unknown {
  const a: Record<string, unknown> = {};
  a.self = a;
  return a;
}

describe('callIdOf', () => {
  const call = {
    trajectoryId: 'run-7.sub:2',
    turn: 3,
    toolCallId: 'toolu_01A09q90qw90lq917835lq9',
    tool: 'write_file',
    // Keys out of order, a non-ASCII string, a number JSON writes in another form, nesting.
    args: { path: '/workspace/t-1/é.txt', mode: 420, size: 1.5e3, opts: { z: true, a: null }, lines: ['x', 2] },
  };

  test('pins the hash input: the RFC 8785 text of [tag, trajectory, turn, tool-call id, tool, args], SHA-256, base64url', () => {
    const input =
      '["warrant.call_id.v1","run-7.sub:2",3,"toolu_01A09q90qw90lq917835lq9","write_file",' +
      '{"lines":["x",2],"mode":420,"opts":{"a":null,"z":true},"path":"/workspace/t-1/é.txt","size":1500}]';
    const expected = `wc1_${createHash('sha256').update(input, 'utf8').digest('base64url')}`;
    expect(callIdOf(call)).toBe(expected);
    expect(expected).toMatch(/^wc1_[A-Za-z0-9_-]{43}$/);
    expect(ApproveBody.shape.call_id.safeParse(expected).success).toBe(true);
  });

  test.each([
    ['trajectoryId', { trajectoryId: 'run-7.sub:3' }],
    ['turn', { turn: 4 }],
    ['toolCallId', { toolCallId: 'toolu_other' }],
    ['tool', { tool: 'read_file' }],
    ['args', { args: { ...call.args, mode: 421 } }],
  ])('a different %s is a different call_id', (_, change) => {
    expect(callIdOf({ ...call, ...change })).not.toBe(callIdOf(call));
  });

  test('parts cannot run into each other', () => {
    expect(callIdOf({ ...call, trajectoryId: 'a', toolCallId: 'bc' })).not.toBe(callIdOf({ ...call, trajectoryId: 'ab', toolCallId: 'c' }));
  });

  test.each([
    ['a negative turn', { turn: -1 }],
    ['a fractional turn', { turn: 1.5 }],
    ['NaN in the args', { args: { n: Number.NaN } }],
    ['a cycle in the args', { args: cyclic() }],
  ])('%s is a TypeError', (_, change) => {
    expect(() => callIdOf({ ...call, ...change })).toThrow(TypeError);
  });
});
