/**
 * The layer rules of DESIGN.md, checked on the import specifiers of every source file: only src/node
 * may use Node built-ins (the same app must bundle for Workers); the core depends on nothing but
 * itself, zod, @cfworker/json-schema (a pure JSON Schema interpreter, issue 17) and redos-detector (a pure
 * regex analyser, to refuse ReDoS-prone tool patterns); no shared layer reaches into an entry (src/node, src/worker.ts).
 */
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import ts from 'typescript';
import { describe, expect, test } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..');
const SRC = join(ROOT, 'src');

/**
 * Every module specifier in a TypeScript source: static imports and re-exports (type-only ones
 * too), `import x = require()`, dynamic `import()`, `require()` and `import('x').T` types.
 * Parsed, so specifiers inside comments or ordinary strings are not mistaken for imports.
 */
function importSpecifiers(code: string, fileName = 'sample.ts'): string[] {
  const source = ts.createSourceFile(fileName, code, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  const found: string[] = [];
  const literal = (node: ts.Node | undefined): void => {
    if (node !== undefined && ts.isStringLiteralLike(node)) found.push(node.text);
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) literal(node.moduleSpecifier);
    else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) literal(node.moduleReference.expression);
    else if (ts.isCallExpression(node)) {
      const callee = node.expression;
      if (callee.kind === ts.SyntaxKind.ImportKeyword || (ts.isIdentifier(callee) && callee.text === 'require')) literal(node.arguments[0]);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) literal(node.argument.literal);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const BUILTINS = new Set(builtinModules);

/** `node:anything`, or a bare name Node resolves to a built-in (`fs`, `fs/promises`, `crypto`, …). */
function isBuiltin(specifier: string): boolean {
  return specifier.startsWith('node:') || BUILTINS.has(specifier);
}

const isRelative = (s: string): boolean => s.startsWith('./') || s.startsWith('../');

/** A package's name from a bare specifier: `@scope/pkg/sub` → `@scope/pkg`, `pkg/sub` → `pkg`. */
function packageName(specifier: string): string {
  const parts = specifier.split('/');
  return (specifier.startsWith('@') ? parts.slice(0, 2) : parts.slice(0, 1)).join('/');
}

/** The source file a relative specifier names (`./x.js` is `./x.ts` under the Bundler resolution). */
function resolveRelative(from: string, specifier: string): string {
  const base = resolve(dirname(from), specifier);
  const candidates = [base.replace(/\.js$/, '.ts'), base, `${base}.ts`, join(base, 'index.ts')];
  return candidates.find((c) => existsSync(c) && c.endsWith('.ts')) ?? base;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => join(e.parentPath, e.name))
    .sort();
}

interface Edge {
  readonly file: string;
  readonly specifier: string;
  /** The file imported, for a relative specifier. */
  readonly target?: string;
}

const rel = (file: string): string => relative(ROOT, file).split(sep).join('/');
const FILES = sourceFiles(SRC);
const EDGES: Edge[] = FILES.flatMap((file) =>
  importSpecifiers(readFileSync(file, 'utf8'), file).map((specifier) => ({
    file,
    specifier,
    ...(isRelative(specifier) ? { target: resolveRelative(file, specifier) } : {}),
  })),
);
const under = (file: string, dir: string): boolean => rel(file).startsWith(`${dir}/`);
const show = (edges: readonly Edge[]): string[] => edges.map((e) => `${rel(e.file)} imports ${e.specifier}`);

describe('the import scanner', () => {
  test.each([
    ["import { readFileSync } from 'node:fs';", ['node:fs'], true],
    ['import fs from "fs";', ['fs'], true],
    ["import type { Socket } from 'net';", ['net'], true],
    ["export * from 'node:path';", ['node:path'], true],
    ["export { readFile } from 'fs/promises';", ['fs/promises'], true],
    ["const os = await import('node:os');", ['node:os'], true],
    ["const cp = require('child_process');", ['child_process'], true],
    ["import crypto = require('crypto');", ['crypto'], true],
    ["let b: import('buffer').Buffer;", ['buffer'], true],
    ["import { z } from 'zod';", ['zod'], false],
    ["import { ALG } from '../crypto/keys.js';", ['../crypto/keys.js'], false],
    ["// import fs from 'node:fs'\nconst s = 'node:fs';", [], false],
  ] as const)('%s → %j (a built-in: %s)', (code, specifiers, builtin) => {
    const found = importSpecifiers(code);
    expect(found).toEqual(specifiers);
    expect(found.some(isBuiltin)).toBe(builtin);
  });

  test('it sees the sources it checks', () => {
    // An empty scan would pass every rule below.
    expect(FILES.map(rel)).toEqual(expect.arrayContaining(['src/core/approve.ts', 'src/http/app.ts', 'src/node/main.ts', 'src/worker.ts']));
    expect(EDGES.some((e) => under(e.file, 'src/node') && isBuiltin(e.specifier))).toBe(true);
  });
});

describe('layers', () => {
  test('no file outside src/node imports a Node built-in', () => {
    expect(show(EDGES.filter((e) => !under(e.file, 'src/node') && isBuiltin(e.specifier)))).toEqual([]);
  });

  test('src/core imports only src/core, zod, @cfworker/json-schema and redos-detector', () => {
    const allowed = new Set(['zod', '@cfworker/json-schema', 'redos-detector']);
    const outside = EDGES.filter(
      (e) => under(e.file, 'src/core') && (e.target !== undefined ? !under(e.target, 'src/core') : !allowed.has(packageName(e.specifier))),
    );
    expect(show(outside)).toEqual([]);
  });

  test.each(['src/core', 'src/crypto', 'src/store', 'src/service', 'src/http'])('%s imports no entry (src/node, src/worker.ts)', (dir) => {
    const entry = EDGES.filter((e) => under(e.file, dir) && e.target !== undefined && (under(e.target, 'src/node') || rel(e.target) === 'src/worker.ts'));
    expect(show(entry)).toEqual([]);
  });

  test('nothing src/worker.ts reaches imports from src/node', () => {
    const seen = new Set<string>();
    const pending = [join(SRC, 'worker.ts')];
    for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
      if (seen.has(file)) continue;
      seen.add(file);
      for (const e of EDGES) if (e.file === file && e.target !== undefined) pending.push(e.target);
    }
    expect(seen.size).toBeGreaterThan(5);
    expect([...seen].map(rel).filter((f) => f.startsWith('src/node/'))).toEqual([]);
  });

  test('src/core compiles without Node or DOM types, and typecheck compiles it', () => {
    const config = JSON.parse(readFileSync(join(SRC, 'core/tsconfig.json'), 'utf8')) as { compilerOptions?: { types?: unknown; lib?: unknown } };
    expect(config.compilerOptions?.types).toEqual([]);
    expect(config.compilerOptions?.lib).not.toContain('DOM');
    const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    expect(scripts.typecheck).toContain('-p src/core/tsconfig.json');
  });
});
