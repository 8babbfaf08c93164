/**
 * The Workers entry bundles: `wrangler deploy --dry-run` (esbuild, no login, nothing uploaded)
 * builds src/worker.ts, and the bundle imports no Node built-in beyond the few that postgres.js's
 * Workers build needs, all provided by the `nodejs_compat` flag of wrangler.toml. Then that very
 * bundle runs in workerd (miniflare, as `wrangler dev` does): without a usable configuration it
 * answers 503 rather than crashing, and with TEST_DATABASE_URL set it serves decisions through
 * postgres.js over cloudflare:sockets, by DATABASE_URL and through a (local) Hyperdrive binding.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Readable } from 'node:stream';
// miniflare is wrangler's own local runtime (pinned by wrangler 4.86.0), hoisted into node_modules.
import { Miniflare } from 'miniflare';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
// esbuild is what wrangler bundles with (pinned to wrangler's version): here it bundles the small validator Worker.
import { build } from 'esbuild';
import { createTenant } from '../src/service/tenants.js';
import { Store } from '../src/store/store.js';
import { KEYS, mintBody, startHarness } from './support/app.js';
import { BACKENDS, openTestDatabase, type TestDatabase } from './support/db.js';
import { SHELL } from './support/tools.js';

const ROOT = resolve(import.meta.dirname, '..');
const COMPATIBILITY_DATE = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync(join(ROOT, 'wrangler.toml'), 'utf8'))?.[1];
const RING = JSON.stringify(KEYS.ring);
/** The private part of the ring's signing key: it must never appear in a log line. */
const PRIVATE_D = KEYS.ring.keys.find((k) => k.d !== undefined)?.d as string;
/** As much of a secret as V8 quotes in a JSON.parse error message ("Unexpected token 'k', "kgD6r2hxNJ"... is not valid JSON"). */
const QUOTED = PRIVATE_D.slice(0, 10);
const UNREACHABLE = 'postgres://warrant@127.0.0.1:1/warrant';
/** Well-formed, so that only a database lookup could reject it. */
const SOME_API_KEY = `wk.${'k'.repeat(12)}.${'s'.repeat(43)}`;

// postgres.js (cf/src, cf/polyfills.js) imports exactly these; nodejs_compat implements them. A new
// built-in here means some dependency started pulling Node code into the Worker: look before allowing it.
const ALLOWED_NODE = new Set(['node:buffer', 'node:events', 'node:stream']);

/** Specifiers esbuild left external in an ESM bundle: top-level imports/re-exports, `import()`, `__require()`. */
function externalImports(bundle: string): string[] {
  const patterns = [
    /^\s*(?:import|export)\b[^;'"`]*?\bfrom\s*"([^"]+)"/gm,
    /^\s*import\s*"([^"]+)"/gm,
    /\bimport\(\s*"([^"]+)"\s*\)/g,
    /\b__require\(\s*"([^"]+)"\s*\)/g,
  ];
  return [...new Set(patterns.flatMap((p) => [...bundle.matchAll(p)].map((m) => m[1] as string)))].sort();
}

function run(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; output: string }> {
  return new Promise((done) => {
    execFile(command, args, { cwd: ROOT, env, timeout: 80_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : 1;
      done({ code, output: `${stdout}\n${stderr}` });
    });
  });
}

describe('the Workers bundle', () => {
  let dir: string;
  let result: { code: number; output: string };
  let bundle: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'warrant-worker-'));
    result = await run('npx', ['wrangler', 'deploy', '--dry-run', '--outdir', dir], {
      ...process.env,
      CI: '1',
      WRANGLER_SEND_METRICS: 'false',
      WRANGLER_LOG_PATH: join(dir, 'logs'),
    });
    bundle = result.code === 0 ? readFileSync(join(dir, 'worker.js'), 'utf8') : '';
  }, 90_000);

  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  test('wrangler builds it without an account', () => {
    expect(result.code, result.output).toBe(0);
    expect(result.output).toContain('--dry-run: exiting now');
  });

  test('the bundle holds the whole app', () => {
    expect(statSync(join(dir, 'worker.js')).size).toBeGreaterThan(200_000);
    // Routes of API.md and the postgres.js client made it in; the embedded database did not.
    expect(bundle).toContain('/v1/approve');
    expect(bundle).toContain('/.well-known/jwks.json');
    expect(bundle).toContain('postgres');
    expect(bundle).not.toMatch(/pglite/i);
  });

  test('postgres.js resolved to its Workers build (TCP through cloudflare:sockets)', () => {
    expect(externalImports(bundle)).toContain('cloudflare:sockets');
  });

  test('no Node built-in beyond what nodejs_compat provides for postgres.js', () => {
    const builtins = new Set(builtinModules);
    const imported = externalImports(bundle);
    const node = imported.filter((s) => s.startsWith('node:') || builtins.has(s));
    expect(node.length).toBeGreaterThan(0);
    expect(node.filter((s) => !ALLOWED_NODE.has(s))).toEqual([]);
    // Everything else external must be a runtime module, never a package left unbundled.
    expect(imported.filter((s) => !node.includes(s) && !s.startsWith('cloudflare:'))).toEqual([]);
  });

  describe('the bundle in workerd', () => {
    interface RunningWorker {
      // Bodies are read freely; the assertions check their shape.
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      call(method: string, path: string, body?: unknown, apiKey?: string): Promise<{ status: number; body: any }>;
      /** What the Worker wrote to stdout and stderr so far. */
      logs(): string;
      close(): Promise<void>;
    }

    async function startWorker(config: { bindings?: Record<string, string>; hyperdrive?: string }): Promise<RunningWorker> {
      let logs = '';
      const mf = new Miniflare({
        modules: true,
        scriptPath: join(dir, 'worker.js'),
        modulesRoot: dir,
        compatibilityDate: COMPATIBILITY_DATE,
        compatibilityFlags: ['nodejs_compat'],
        bindings: config.bindings ?? {},
        ...(config.hyperdrive === undefined ? {} : { hyperdrives: { HYPERDRIVE: config.hyperdrive } }),
        handleRuntimeStdio(stdout: Readable, stderr: Readable) {
          stdout.on('data', (chunk: Buffer) => (logs += chunk.toString()));
          stderr.on('data', (chunk: Buffer) => (logs += chunk.toString()));
        },
      });
      await mf.ready;
      return {
        async call(method, path, body, apiKey) {
          const headers: Record<string, string> = { 'content-type': 'application/json' };
          if (apiKey !== undefined) headers.authorization = `Bearer ${apiKey}`;
          const r = await mf.dispatchFetch(`http://warrant.test${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
          return { status: r.status, body: await r.json() };
        },
        logs: () => logs,
        close: () => mf.dispose(),
      };
    }

    test('wrangler.toml names a compatibility date', () => {
      expect(COMPATIBILITY_DATE).toMatch(/^\d{4}-\d{2}-\d{2}$/);
    });

    test.each([
      ['nothing is configured', {}],
      // A bare private key pasted instead of a JWK set: the parse error would quote it.
      ['the signing keys are not JSON', { DATABASE_URL: UNREACHABLE, WARRANT_SIGNING_KEYS: PRIVATE_D }],
      ['the key set has no signing key', { DATABASE_URL: UNREACHABLE, WARRANT_SIGNING_KEYS: JSON.stringify(KEYS.old).replace(/"d":"[^"]*",?/, '') }],
      ['the database is unreachable', { DATABASE_URL: UNREACHABLE, WARRANT_SIGNING_KEYS: RING }],
    ])(
      'when %s: liveness answers, everything else is 503 unavailable',
      async (_, bindings) => {
        const worker = await startWorker({ bindings });
        try {
          expect(await worker.call('GET', '/healthz')).toEqual({ status: 200, body: { ok: true } });
          const ready = await worker.call('GET', '/readyz');
          expect([ready.status, ready.body.error.code]).toEqual([503, 'unavailable']);
          const approve = await worker.call('POST', '/v1/approve', { token: 'x', op: 'read', target: { kind: 'path', path: '/a' }, cost: 0 }, SOME_API_KEY);
          expect([approve.status, approve.body.error.code]).toEqual([503, 'unavailable']);
          expect(worker.logs()).not.toContain(QUOTED);
        } finally {
          await worker.close();
        }
      },
      30_000,
    );

    describe('tool schemas and args in workerd (issue 17: no code generation at run time)', () => {
      let mf: Miniflare;
      beforeAll(async () => {
        const out = await build({
          entryPoints: [join(ROOT, 'test/support/validator-worker.ts')],
          bundle: true,
          format: 'esm',
          platform: 'neutral',
          mainFields: ['module', 'main'],
          write: false,
        });
        mf = new Miniflare({
          modules: true,
          script: out.outputFiles[0]?.text ?? '',
          compatibilityDate: COMPATIBILITY_DATE,
          compatibilityFlags: ['nodejs_compat'],
        });
        await mf.ready;
      }, 30_000);
      afterAll(async () => mf?.dispose());

      const check = async (schema: unknown, args: unknown): Promise<{ violations: { code: string }[]; errors: { path: string }[] }> =>
        (await (await mf.dispatchFetch('http://validator.test/', { method: 'POST', body: JSON.stringify({ schema, args }) })).json()) as never;

      test('workerd refuses code generation from strings (the control)', async () => {
        const r = (await (await mf.dispatchFetch('http://validator.test/eval')).json()) as { refused?: string };
        expect(r.refused).toMatch(/code generation/i);
      });

      test('the shell tool checks, and its args are validated with every failing path', async () => {
        const schema = SHELL.input_schema;
        expect((await check(schema, { command: 'ls', cwd: '/w', timeout_ms: 5000 })).errors).toEqual([]);
        const bad = await check(schema, { command: '', timeout_ms: 999_999, extra: 1 });
        expect(bad.violations).toEqual([]);
        expect(bad.errors.map((e) => e.path).sort()).toEqual(['args.command', 'args.cwd', 'args.extra', 'args.timeout_ms']);
        expect((await check({ type: 'object', properties: { a: { type: 'string' } } }, {})).violations.map((v) => v.code)).toEqual([
          'open_object',
          'required_missing',
          'string_unbounded',
        ]);
      });

      test('a ReDoS-prone pattern is refused there too (the clock stands still in workerd: maxSteps bounds the check)', async () => {
        const withPattern = (pattern: string) => ({
          type: 'object',
          additionalProperties: false,
          required: ['a'],
          properties: { a: { type: 'string', maxLength: 64, pattern } },
        });
        expect((await check(withPattern('^(a|a)*$'), { a: 'a' })).violations.map((v) => v.code)).toEqual(['pattern_unsafe']);
        expect((await check(withPattern('^[a-z0-9-]{1,64}$'), { a: 'a' })).violations).toEqual([]);
      });
    });

    describe.skipIf(!BACKENDS.includes('postgres'))('on a PostgreSQL server', () => {
      let database: TestDatabase;
      let apiKey: string;

      beforeAll(async () => {
        database = await openTestDatabase('postgres', { poolSize: 2 });
        ({ apiKey } = await createTenant(new Store(database.db), 'worker', new Date()));
      });

      afterAll(async () => {
        await database?.close();
      });

      test.each(['DATABASE_URL', 'HYPERDRIVE'] as const)(
        'through %s: mint, grant, deny, read back, audit chain intact',
        async (via) => {
          const url = new URL(database.url as string);
          // A Hyperdrive origin needs some password, even where the server trusts the client.
          if (via === 'HYPERDRIVE' && url.password === '') url.password = 'unused';
          const worker = await startWorker(
            via === 'HYPERDRIVE'
              ? { hyperdrive: url.toString(), bindings: { WARRANT_SIGNING_KEYS: RING } }
              : { bindings: { DATABASE_URL: url.toString(), WARRANT_SIGNING_KEYS: RING } },
          );
          try {
            const trajectory = `t-${via.toLowerCase()}`;
            const minted = await worker.call(
              'POST',
              '/v1/capabilities',
              mintBody({ trajectory_id: trajectory, objects: [{ kind: 'path', prefix: '/workspace' }] }),
              apiKey,
            );
            expect(minted.status).toBe(201);
            const token = minted.body.token as string;
            const granted = await worker.call('POST', '/v1/approve', { token, op: 'write', target: { kind: 'path', path: '/workspace/a' }, cost: 2.5 }, apiKey);
            expect([granted.status, granted.body.decision, granted.body.budget_remaining]).toEqual([200, 'grant', 7.5]);
            const denied = await worker.call(
              'POST',
              '/v1/approve',
              { token, op: 'write', target: { kind: 'path', path: '/workspace/../etc/passwd' }, cost: 0 },
              apiKey,
            );
            expect([denied.status, denied.body.decision, denied.body.reason.code]).toEqual([200, 'deny', 'object_outside']);
            // text[] columns come back as arrays although the Worker's client skips fetching array types.
            const read = await worker.call('GET', `/v1/capabilities/${minted.body.capability_id}`, undefined, apiKey);
            expect([read.status, read.body.rights]).toEqual([200, ['read', 'write']]);
            const audit = await worker.call('GET', `/v1/audit?trajectory_id=${trajectory}`, undefined, apiKey);
            expect(audit.body.entries.map((e: { event: string; decision: string }) => `${e.event}:${e.decision}`)).toEqual([
              'mint:grant',
              'approve:grant',
              'approve:deny',
            ]);
            const verified = await worker.call('GET', '/v1/audit/verify', undefined, apiKey);
            expect([verified.status, verified.body.ok]).toEqual([200, true]);
            for (const secret of [apiKey, token, QUOTED]) expect(worker.logs()).not.toContain(secret);
          } finally {
            await worker.close();
          }
        },
        30_000,
      );

      test('one ring in both secrets is refused: whoever held a token key could sign checkpoints', async () => {
        const worker = await startWorker({ bindings: { DATABASE_URL: database.url as string, WARRANT_SIGNING_KEYS: RING, WARRANT_AUDIT_KEYS: RING } });
        try {
          const ready = await worker.call('GET', '/readyz');
          expect([ready.status, ready.body.error.code]).toEqual([503, 'unavailable']);
          expect(worker.logs()).toContain('share a key');
        } finally {
          await worker.close();
        }
      }, 30_000);

      test('a tool registered and called through the bundle: invalid args denied, valid ones granted, an irreversible call approved', async () => {
        const worker = await startWorker({ bindings: { DATABASE_URL: database.url as string, WARRANT_SIGNING_KEYS: RING } });
        try {
          expect((await worker.call('PUT', '/v1/tools/shell', SHELL, apiKey)).status).toBe(201);
          const minted = await worker.call(
            'POST',
            '/v1/capabilities',
            mintBody({ trajectory_id: 't-tools', rights: ['execute'], objects: [{ kind: 'path', prefix: '/workspace' }] }),
            apiKey,
          );
          const token = minted.body.token as string;
          const invalid = await worker.call(
            'POST',
            '/v1/approve',
            { token, tool: 'shell', args: { command: '', cwd: '/workspace', timeout_ms: 1 }, cost: 0, call_id: 'w-0' },
            apiKey,
          );
          expect([invalid.body.decision, invalid.body.reason.code, invalid.body.reason.fields.map((f: { path: string }) => f.path).sort()]).toEqual([
            'deny',
            'args_invalid',
            ['args.command', 'args.timeout_ms'],
          ]);
          const call = { token, tool: 'shell', args: { command: 'make', cwd: '/workspace', timeout_ms: 60000 }, cost: 1, call_id: 'w-1' };
          const pending = await worker.call('POST', '/v1/approve', call, apiKey);
          expect(pending.body.decision).toBe('pending');
          // The key that asked may not approve its own call (self_approval); an approver's key may.
          const self = await worker.call('POST', `/v1/approvals/${pending.body.approval_id}`, { decision: 'approve' }, apiKey);
          expect([self.status, self.body.error.code]).toEqual([403, 'self_approval']);
          const approver = (await worker.call('POST', '/v1/api-keys', { name: 'approver', roles: ['approver'] }, apiKey)).body.api_key as string;
          const resolved = await worker.call('POST', `/v1/approvals/${pending.body.approval_id}`, { decision: 'approve' }, approver);
          expect([resolved.status, resolved.body.outcome.decision]).toEqual([200, 'grant']);
          const repeated = await worker.call('POST', '/v1/approve', call, apiKey);
          expect([repeated.body.decision, repeated.body.budget_remaining]).toEqual(['grant', 9]);
          expect(worker.logs()).not.toMatch(/code generation/i);
        } finally {
          await worker.close();
        }
      }, 60_000);

      test('mint, attenuate (and a refusal), approve, revoke and audit answer as on Node', async () => {
        const worker = await startWorker({ bindings: { DATABASE_URL: database.url as string, WARRANT_SIGNING_KEYS: RING } });
        const node = await startHarness('pglite');
        try {
          const onWorker = await scenario((method, path, body) => worker.call(method, path, body, apiKey), 't-same');
          const onNode = await scenario((method, path, body) => node.call(method, path, body), 't-same');
          expect(onWorker).toEqual(onNode);
          expect(onNode[2]).toEqual([403, 'attenuation_refused', expect.arrayContaining(['object_widened', 'right_widened'])]);
        } finally {
          await worker.close();
          await node.close();
        }
      }, 60_000);
    });
  });

  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  type Call = (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>;

  /** One walk through the API, reduced to what must not differ between runtimes (no ids, no times). */
  async function scenario(call: Call, trajectory: string): Promise<unknown[]> {
    const out: unknown[] = [];
    const root = await call('POST', '/v1/capabilities', mintBody({ trajectory_id: trajectory, objects: [{ kind: 'path', prefix: '/workspace' }] }));
    out.push([root.status, root.body.depth, root.body.rights]);
    const child = await call('POST', '/v1/attenuate', {
      parent_token: root.body.token,
      rights: ['read'],
      objects: [{ kind: 'path', prefix: '/workspace/a' }],
      predicate: { budget: 2, max_calls: 10, max_depth: 1 },
    });
    out.push([child.status, child.body.depth, child.body.parent_id === root.body.capability_id]);
    const refused = await call('POST', '/v1/attenuate', {
      parent_token: child.body.token,
      rights: ['write'],
      objects: [{ kind: 'path', prefix: '/' }],
      predicate: {},
    });
    out.push([refused.status, refused.body.error.code, (refused.body.error.violations as { code: string }[]).map((v) => v.code).sort()]);
    const calls: [string, string, number][] = [
      ['read', '/workspace/a/f', 1.5],
      ['read', '/workspace/a/../b', 0],
      ['write', '/workspace/a/f', 0],
      ['read', '/workspace/a/g', 1],
    ];
    for (const [op, path, cost] of calls) {
      const r = await call('POST', '/v1/approve', { token: child.body.token, op, target: { kind: 'path', path }, cost });
      out.push([r.status, r.body.decision, r.body.reason?.code ?? null, r.body.budget_remaining, r.body.calls_remaining]);
    }
    const revoked = await call('POST', '/v1/revoke', { capability_id: root.body.capability_id });
    out.push([revoked.status, (revoked.body.revoked as string[]).length]);
    const after = await call('POST', '/v1/approve', { token: child.body.token, op: 'read', target: { kind: 'path', path: '/workspace/a/f' }, cost: 0 });
    out.push([after.body.decision, after.body.reason?.code]);
    const audit = await call('GET', `/v1/audit?trajectory_id=${trajectory}`);
    out.push(
      (audit.body.entries as { event: string; decision: string; reason_code: string | null }[]).map((e) => `${e.event}:${e.decision}:${e.reason_code ?? ''}`),
    );
    out.push((await call('GET', '/v1/audit/verify')).body.ok);
    return out;
  }

  test('the import scan reads esbuild output', () => {
    const sample =
      'import { Buffer as B2 } from "node:buffer";\nimport Stream from "node:stream";\nimport {\n  a,\n  b\n} from "fs";\nconst s = await import("cloudflare:sockets");\nvar t = __require("net");\n// import x from "node:tls"\n';
    expect(externalImports(sample)).toEqual(['cloudflare:sockets', 'fs', 'net', 'node:buffer', 'node:stream']);
  });
});
