/**
 * The package as integrators get it: `npm pack` of the built repository, unpacked into a scratch
 * project under the OS temporary directory whose node_modules holds only the tarball and the
 * client's own dependencies (jose, zod) linked from this checkout, so it works offline. From plain
 * `node` (no tsx, no loader) `warrant/client` mints, approves and verifies offline against a real
 * listening server; tsc type-checks a snippet importing it; and the client's compiled import graph
 * stays clear of Node built-ins and server code. Fails if the package shipped only TypeScript
 * sources (node cannot import them) or no declarations (the snippet does not type-check).
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { serve, type ServerType } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startHarness, T0, type Harness } from '../support/app.js';

const ROOT = resolve(import.meta.dirname, '../..');
/** What the client may import at run time: nothing else is linked into the scratch project. */
const CLIENT_DEPENDENCIES = ['jose', 'zod', '@noble/hashes', 'canonicalize'];

const USE_CLIENT = `
import { WarrantClient, WarrantError, verifyOffline } from 'warrant/client';
const client = new WarrantClient({ baseUrl: process.env.BASE, apiKey: process.env.KEY });
const cap = await client.mint({ trajectory_id: 'pack-1', rights: ['read'], objects: [{ kind: 'path', prefix: '/w' }], predicate: {}, ttl_s: 600 });
const grant = await client.approve({ token: cap.token, op: 'read', target: { kind: 'path', path: '/w/a' }, cost: 0 });
const deny = await client.approve({ token: cap.token, op: 'write', target: { kind: 'path', path: '/w/a' }, cost: 0 });
const offline = await verifyOffline(cap.token, new URL(process.env.BASE + '/.well-known/jwks.json'), new Date(Number(process.env.NOW)));
let error = null;
try { await client.capability('cap_nope'); } catch (e) { error = e instanceof WarrantError ? e.code : 'not a WarrantError'; }
console.log(JSON.stringify({ grant: grant.decision, deny: deny.reason.code, offline: offline.ok && offline.claims.capability_id === cap.capability_id, error }));
`;

const TYPED_SNIPPET = `
import { WarrantClient, verifyOffline, type Decision, type MintRequest } from 'warrant/client';
const client = new WarrantClient({ baseUrl: 'http://127.0.0.1:8080', apiKey: 'wk.x.y' });
const body: MintRequest = { trajectory_id: 't', rights: ['read'], objects: [{ kind: 'path', prefix: '/w' }], predicate: {}, ttl_s: 60 };
export async function run(): Promise<string> {
  const cap = await client.mint(body);
  const d: Decision = await client.approve({ token: cap.token, op: 'read', target: { kind: 'path', path: '/w/a' }, cost: 0 });
  const v = await verifyOffline(cap.token, new URL('http://127.0.0.1:8080/.well-known/jwks.json'));
  // @ts-expect-error a right the API does not have: proves the declarations are real types, not any
  await client.mint({ ...body, rights: ['launch'] });
  return v.ok ? v.claims.trajectory_id : d.decision;
}
`;

/** Runs node without blocking this process, whose event loop serves the requests. */
function node(args: string[], options: { cwd: string; env: Record<string, string> }): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, args, options);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((done, fail) => {
    child.once('error', fail);
    child.once('close', (code) => done({ code, stdout, stderr }));
  });
}

/** The relative and bare specifiers a compiled module imports (static and dynamic). */
function specifiers(source: string): string[] {
  return [...source.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^import\s*)['"]([^'"]+)['"]/gm)].map((m) => m[1] as string);
}

describe('the packed package, from plain Node and tsc', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'warrant-pack-'));
  const installed = join(scratch, 'node_modules', 'warrant');
  let packed: string[];
  let h: Harness;
  let server: ServerType;
  let base: string;

  beforeAll(async () => {
    // The global setup built dist/; --ignore-scripts keeps npm pack from building it again.
    const out = execFileSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', scratch], { cwd: ROOT, encoding: 'utf8' });
    const [info] = JSON.parse(out) as { filename: string; files: { path: string }[] }[];
    packed = info!.files.map((f) => f.path);
    mkdirSync(installed, { recursive: true });
    execFileSync('tar', ['-xzf', join(scratch, info!.filename), '-C', installed, '--strip-components=1']);
    for (const name of CLIENT_DEPENDENCIES) {
      mkdirSync(dirname(join(scratch, 'node_modules', name)), { recursive: true });
      symlinkSync(join(ROOT, 'node_modules', name), join(scratch, 'node_modules', name), 'dir');
    }
    writeFileSync(join(scratch, 'package.json'), JSON.stringify({ name: 'scratch', private: true, type: 'module' }));

    h = await startHarness('pglite');
    await new Promise<void>((ready) => {
      server = serve({ fetch: h.app.fetch, port: 0, hostname: '127.0.0.1' }, () => ready());
    });
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }, 60_000);

  afterAll(async () => {
    await new Promise((done) => server?.close(done));
    await h?.close();
    rmSync(scratch, { recursive: true, force: true });
  });

  test('the tarball holds the compiled client with declarations, the CLI and migrations; no sources', () => {
    expect(packed).toEqual(expect.arrayContaining(['dist/client/index.js', 'dist/client/index.d.ts', 'dist/node/warrant-cli.js', 'bin/warrant.mjs']));
    expect(packed.some((p) => p.startsWith('db/migrations/') && p.endsWith('.sql'))).toBe(true);
    expect(packed.filter((p) => p.startsWith('src/') || p.startsWith('test/') || p.includes('tsbuildinfo') || p.startsWith('dist/worker'))).toEqual([]);
  });

  test('plain node imports warrant/client and uses it against a listening server', async () => {
    writeFileSync(join(scratch, 'use.mjs'), USE_CLIENT);
    const env = { PATH: process.env.PATH ?? '', BASE: base, KEY: h.tenants.a, NOW: String(T0) };
    const r = await node(['use.mjs'], { cwd: scratch, env });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ grant: 'grant', deny: 'right_missing', offline: true, error: 'not_found' });
  });

  test('tsc type-checks a snippet importing warrant/client (NodeNext resolution, no Node types)', async () => {
    writeFileSync(join(scratch, 'snippet.ts'), TYPED_SNIPPET);
    const tsconfig = {
      compilerOptions: {
        strict: true,
        noEmit: true,
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        target: 'ES2022',
        lib: ['ES2022', 'DOM'],
        types: [],
        skipLibCheck: true,
      },
      files: ['snippet.ts'],
    };
    writeFileSync(join(scratch, 'tsconfig.json'), JSON.stringify(tsconfig));
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const r = await node([tsc, '-p', scratch], { cwd: scratch, env: { PATH: process.env.PATH ?? '' } });
    expect(r.stdout + r.stderr).toBe('');
    expect(r.code).toBe(0);
  }, 60_000);

  test("the client's compiled import graph has no Node built-in, no server code and only the client's dependencies", () => {
    const seen = new Set<string>();
    const bare = new Set<string>();
    const visit = (file: string): void => {
      if (seen.has(file)) return;
      seen.add(file);
      for (const s of specifiers(readFileSync(file, 'utf8'))) {
        if (s.startsWith('.')) visit(resolve(dirname(file), s));
        else bare.add(s);
      }
    };
    visit(join(installed, 'dist/client/index.js'));
    const dirs = new Set([...seen].map((f) => relative(join(installed, 'dist'), f).split('/')[0]));
    expect([...dirs].sort()).toEqual(expect.arrayContaining(['client']));
    expect([...dirs].filter((d) => !['client', 'core', 'crypto', 'audit'].includes(d as string))).toEqual([]);
    expect([...bare].filter((s) => !CLIENT_DEPENDENCIES.some((d) => s === d || s.startsWith(`${d}/`)))).toEqual([]);
    // The dynamic import of the receipt code is followed too.
    expect(dirs.has('audit')).toBe(true);
  });
});
