/**
 * `warrant tools import` and `warrant approvals` (issue 17) against the real server on embedded
 * PGlite: an MCP tools/list answer is registered (a tool that breaks the rules reported, exit 1, the
 * others still registered), a call by an irreversible tool waits, an approver's key approves it from
 * the command line, and the driver's repeat learns the grant.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { warrant } from '../support/cli.js';
import { cleanupServers, seedDataDir, startServer, tempDir, type RunningServer } from '../support/server.js';

const closed = (properties: Record<string, unknown>, required: string[]) => ({ type: 'object', additionalProperties: false, required, properties });
const MCP_LIST = {
  tools: [
    {
      name: 'read_file',
      description: 'Read a file',
      inputSchema: closed({ path: { type: 'string', maxLength: 4096 } }, ['path']),
      annotations: { readOnlyHint: true },
    },
    {
      name: 'delete_file',
      description: 'Delete a file',
      inputSchema: closed({ path: { type: 'string', maxLength: 4096 } }, ['path']),
      annotations: { destructiveHint: true },
    },
    { name: 'loose', description: 'An open, unbounded schema', inputSchema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } },
  ],
};

describe('warrant tools and approvals', () => {
  const dir = tempDir();
  const dataDir = join(dir, 'data');
  let server: RunningServer;
  let env: Record<string, string>;
  beforeAll(async () => {
    await seedDataDir(dataDir);
    server = await startServer({ dataDir });
    env = { WARRANT_URL: server.url, WARRANT_DATA_DIR: dataDir, WARRANT_KEYS_DIR: server.keysDir };
  });
  afterAll(cleanupServers);

  test('import an MCP tool list, then resolve a waiting call from the command line', async () => {
    const file = join(dir, 'tools.json');
    writeFileSync(file, JSON.stringify(MCP_LIST));
    const imported = await warrant(['tools', 'import', file, '--right', 'write', '--target', '/path:path'], env);
    expect(imported.code).toBe(1);
    expect(imported.json.tools.map((t: { name: string; side_effect?: string; error?: { code: string } }) => [t.name, t.side_effect ?? t.error?.code])).toEqual([
      ['read_file', 'read_only'],
      ['delete_file', 'irreversible'],
      ['loose', 'tool_schema_refused'],
    ]);
    expect((await warrant(['tools', 'import', file, '--right', 'nope', '--target', '/path:path'], env)).code).toBe(2);
    const listed = await warrant(['tools', 'list'], env);
    expect(listed.json.tools.map((t: { name: string }) => t.name).sort()).toEqual(['delete_file', 'read_file']);

    const mint = await warrant(
      ['mint'],
      env,
      JSON.stringify({
        trajectory_id: 'cli-tools',
        rights: ['read', 'write'],
        objects: [{ kind: 'path', prefix: '/w' }],
        predicate: { budget: 1 },
        ttl_s: 600,
      }),
    );
    const call = JSON.stringify({ token: mint.json.token, tool: 'delete_file', args: { path: '/w/old.log' }, cost: 0.25, call_id: 'del-1' });
    const asked = await warrant(['approve'], env, call);
    expect([asked.code, asked.json.decision]).toEqual([3, 'pending']);
    const pending = await warrant(['approvals', 'list'], env);
    expect(pending.json.approvals.map((a: { approval_id: string }) => a.approval_id)).toEqual([asked.json.approval_id]);
    // The key that asked (the data directory's admin key) may not approve its own call; an approver's key may.
    const self = await warrant(['approvals', 'approve', asked.json.approval_id], env);
    expect([self.code, self.json.error.code]).toEqual([1, 'self_approval']);
    const made = await server.call('POST', '/v1/api-keys', { name: 'approver', roles: ['approver'] });
    const asApprover = { ...env, WARRANT_API_KEY: (made.body as { api_key: string }).api_key };
    const approved = await warrant(['approvals', 'approve', asked.json.approval_id, '--note', 'fine'], asApprover);
    expect([approved.code, approved.json.state, approved.json.note, approved.json.outcome.decision]).toEqual([0, 'approved', 'fine', 'grant']);
    expect((await warrant(['approvals', 'reject', asked.json.approval_id], asApprover)).code).toBe(1);
    const repeated = await warrant(['approve'], env, call);
    expect([repeated.code, repeated.json.decision, repeated.json.budget_remaining]).toEqual([0, 'grant', 0.75]);
    expect((await warrant(['approvals', 'get', asked.json.approval_id, '--wait', '1'], env)).json.state).toBe('approved');
  }, 60_000);
});
