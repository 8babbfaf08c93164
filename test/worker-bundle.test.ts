/**
 * The Workers entry bundles: `wrangler deploy --dry-run` (esbuild, no login, nothing uploaded)
 * builds src/worker.ts, and the bundle imports no Node built-in beyond the few that postgres.js's
 * Workers build needs, all provided by the `nodejs_compat` flag of wrangler.toml.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..');

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

  test('the import scan reads esbuild output', () => {
    const sample =
      'import { Buffer as B2 } from "node:buffer";\nimport Stream from "node:stream";\nimport {\n  a,\n  b\n} from "fs";\nconst s = await import("cloudflare:sockets");\nvar t = __require("net");\n// import x from "node:tls"\n';
    expect(externalImports(sample)).toEqual(['cloudflare:sockets', 'fs', 'net', 'node:buffer', 'node:stream']);
  });
});
