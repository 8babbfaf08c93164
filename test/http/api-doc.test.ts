/**
 * docs/api.md against the code (issue 16: "the contract lives in the repository"). Every route the
 * app serves (its OpenAPI operations and the plain routes beside them) is named in the reference;
 * the deny, attenuation violation and error code tables hold exactly the codes the code can return
 * (errors with their status); every relative link of README.md and docs/api.md leads to a file, and
 * to a heading there when it names one; and nothing points to the old, absent API.md any more.
 * The markdown is read with marked's lexer and anchors are made with github-slugger (GitHub's own
 * rule), so code blocks and inline code are never mistaken for links. Each reader is first shown
 * to find what is missing, on a small sample.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import GithubSlugger from 'github-slugger';
import { marked, type Token, type Tokens } from 'marked';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { DENY_CODES, VIOLATION_CODES, VIOLATION_COMPONENTS } from '../../src/core/types.js';
import { generateSigningJwk, loadKeyRing } from '../../src/crypto/keys.js';
import { createApp } from '../../src/http/app.js';
import { Metrics } from '../../src/http/metrics.js';
import { loadDocsAssets } from '../../src/node/docs-assets.js';
import { ERROR_STATUS } from '../../src/service/errors.js';
import { Store } from '../../src/store/store.js';
import { DecisionWriter } from '../../src/store/writer.js';
import { KEYS, T0 } from '../support/app.js';
import { openTestDatabase, type TestDatabase } from '../support/db.js';

const ROOT = resolve(import.meta.dirname, '../..');
const API_DOC = join(ROOT, 'docs/api.md');
const README = join(ROOT, 'README.md');
const read = (file: string): string => readFileSync(file, 'utf8');

// ---- reading markdown ---------------------------------------------------------------------------

/** Every token of a document, nested ones (inline, list items, table cells) included. */
function allTokens(md: string): Token[] {
  const out: Token[] = [];
  void marked.walkTokens(marked.lexer(md), (t) => void out.push(t));
  return out;
}

/** The text a reader sees: inline code without its backticks, links without their targets. */
function plainText(tokens: readonly Token[] | undefined): string {
  return (tokens ?? []).map((t) => ('tokens' in t && t.tokens !== undefined ? plainText(t.tokens) : 'text' in t ? String(t.text) : '')).join('');
}

const headings = (md: string): Tokens.Heading[] => marked.lexer(md).filter((t): t is Tokens.Heading => t.type === 'heading');

/** The inline code spans of a token list, walked to any depth. */
function codeSpans(tokens: readonly Token[]): string[] {
  const out: string[] = [];
  void marked.walkTokens([...tokens], (t) => {
    if (t.type === 'codespan') out.push((t as Tokens.Codespan).text);
  });
  return out;
}

const anchorsOf = new Map<string, Set<string>>();

/** The anchors GitHub gives the document's headings. */
function anchors(md: string): Set<string> {
  let found = anchorsOf.get(md);
  if (found === undefined) {
    const slugger = new GithubSlugger();
    found = new Set(headings(md).map((h) => slugger.slug(plainText(h.tokens))));
    anchorsOf.set(md, found);
  }
  return found;
}

/** The top-level tokens of the section under the heading whose text is `title`, up to the next heading as high. */
function section(md: string, title: string): Token[] {
  const tokens = marked.lexer(md);
  const start = tokens.findIndex((t) => t.type === 'heading' && plainText((t as Tokens.Heading).tokens) === title);
  if (start < 0) return [];
  const depth = (tokens[start] as Tokens.Heading).depth;
  const end = tokens.findIndex((t, i) => i > start && t.type === 'heading' && (t as Tokens.Heading).depth <= depth);
  return tokens.slice(start + 1, end < 0 ? undefined : end);
}

/** The rows of the tables in a section, each as its cells' plain text. */
function tableRows(tokens: readonly Token[]): string[][] {
  return tokens.filter((t): t is Tokens.Table => t.type === 'table').flatMap((t) => t.rows.map((row) => row.map((cell) => plainText(cell.tokens).trim())));
}

/** Relative links of a markdown file that lead nowhere: a missing file, or a missing heading of a markdown file. */
function brokenLinks(file: string, md: string): string[] {
  const broken: string[] = [];
  for (const t of allTokens(md)) {
    if (t.type !== 'link' && t.type !== 'image') continue;
    const href = (t as Tokens.Link).href;
    if (/^[a-z][a-z0-9+.-]*:/i.test(href)) continue; // https:, mailto: …: not a file of the repository
    const [path = '', anchor] = href.split('#', 2);
    if (path === '') {
      if (anchor !== undefined && !anchors(md).has(anchor)) broken.push(`${href}: no heading #${anchor}`);
      continue;
    }
    const target = resolve(dirname(file), decodeURIComponent(path));
    if (!existsSync(target)) broken.push(`${href}: no file ${relative(ROOT, target)}`);
    else if (anchor !== undefined && target.endsWith('.md') && !anchors(read(target)).has(anchor)) broken.push(`${href}: no heading #${anchor}`);
  }
  return broken;
}

describe('the markdown readers find what is missing', () => {
  const sample = [
    '# Sample',
    '## Deny codes',
    '| Code | Meaning |',
    '| --- | --- |',
    '| `bad_token` | … |',
    '## Later',
    'Mentions `unknown_key` and `GET /later`, outside the table.',
    '### `GET /healthz`: liveness',
    '[ok](docs/api.md#conventions) [self](#later) [web](https://example.com/x.md)',
    '[gone](docs/no-such-file.md) [bad anchor](docs/api.md#no-such-heading) [own](#no-such) `[not a link](nowhere.md)`',
    '```',
    '[in a code block](nowhere-either.md)',
    '```',
  ].join('\n');

  test('a section holds only its own tables; headings and inline code are read apart', () => {
    expect(tableRows(section(sample, 'Deny codes')).map((r) => r[0])).toEqual(['bad_token']);
    expect(section(sample, 'No such section')).toEqual([]);
    expect(headings(sample).flatMap((h) => codeSpans(h.tokens))).toEqual(['GET /healthz']);
    expect(codeSpans(marked.lexer(sample))).toContain('GET /later');
  });

  test('anchors are GitHub’s', () => {
    expect([...anchors(sample)]).toEqual(['sample', 'deny-codes', 'later', 'get-healthz-liveness']);
  });

  test('links to a missing file or heading are reported; others, web links and code are not', () => {
    expect(brokenLinks(join(ROOT, 'sample.md'), sample)).toEqual([
      'docs/no-such-file.md: no file docs/no-such-file.md',
      'docs/api.md#no-such-heading: no heading #no-such-heading',
      '#no-such: no heading #no-such',
    ]);
  });
});

// ---- (1) every route ----------------------------------------------------------------------------

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'] as const;

describe('docs/api.md names every route the app serves', () => {
  let database: TestDatabase;
  let openapi: string[];
  let served: string[];
  beforeAll(async () => {
    // The app as `npm start` builds it (metrics and /docs included), so every route it can serve is there.
    database = await openTestDatabase('pglite');
    const now = (): Date => new Date(T0);
    const app = createApp({
      store: new Store(database.db),
      writer: new DecisionWriter(database.db, { now }),
      keys: await loadKeyRing(KEYS.ring),
      auditKeys: await loadKeyRing({ keys: [await generateSigningJwk()] }),
      now,
      metrics: new Metrics(),
      docsAssets: loadDocsAssets(),
    });
    const doc = (await (await app.request('/openapi.json')).json()) as { paths: Record<string, Record<string, unknown>> };
    openapi = Object.entries(doc.paths).flatMap(([path, item]) => METHODS.filter((m) => m in item).map((m) => `${m.toUpperCase()} ${path}`));
    // Middleware is registered as ALL; every handler has its method. `:id` is written `{id}`, as OpenAPI does.
    served = app.routes.filter((r) => r.method !== 'ALL').map((r) => `${r.method} ${r.path.replace(/:(\w+)/g, '{$1}')}`);
  });
  afterAll(async () => database.close());

  const doc = read(API_DOC);
  const inHeadings = new Set(headings(doc).flatMap((h) => codeSpans(h.tokens)));
  const inCode = new Set(codeSpans(marked.lexer(doc)));

  test('the routes read are all of them, keyless and admin ones included', () => {
    for (const r of ['POST /v1/approve', 'DELETE /v1/api-keys/{id}', 'GET /v1/audit/{id}/receipt', 'GET /.well-known/warrant-audit-keys.json', 'GET /readyz'])
      expect(openapi).toContain(r);
    for (const r of ['GET /metrics', 'GET /docs', 'GET /docs/init.js', 'GET /ui', 'GET /ui/app.js', 'GET /openapi.json']) expect(served).toContain(r);
  });

  test('every OpenAPI operation has a heading of its own', () => {
    expect(openapi.filter((r) => !inHeadings.has(r))).toEqual([]);
  });

  test('every other route has a heading too, and its script and style files are named', () => {
    const others = served.filter((r) => !openapi.includes(r));
    const isAsset = (r: string): boolean => /\.(js|css)$/.test(r);
    expect(others.filter((r) => !isAsset(r) && !inHeadings.has(r))).toEqual([]);
    expect(others.filter((r) => isAsset(r) && !inCode.has(r))).toEqual([]);
  });
});

// ---- (2) every code -----------------------------------------------------------------------------

describe('docs/api.md lists exactly the codes the code returns', () => {
  const doc = read(API_DOC);
  const firstCells = (title: string): string[] => tableRows(section(doc, title)).map((r) => r[0] ?? '');

  test('deny codes: the core’s list', () => {
    expect(firstCells('Deny codes').sort()).toEqual([...DENY_CODES].sort());
  });

  test('attenuation violation codes: the core’s list, each with a component the core knows', () => {
    const rows = tableRows(section(doc, 'Attenuation violation codes'));
    expect(rows.map((r) => r[0]).sort()).toEqual([...VIOLATION_CODES].sort());
    for (const r of rows) expect(VIOLATION_COMPONENTS).toContain(r[1]);
  });

  test('errors: every code of ApiError, with its status', () => {
    const rows = tableRows(section(doc, 'Errors')).map(([code, status]) => [code, Number(status)]);
    expect(rows.sort()).toEqual(Object.entries(ERROR_STATUS).sort());
  });

  /** Every `new ApiError(status, 'code'` written in src/, so the table's statuses are those thrown. */
  function thrownErrors(dir: string): [string, number, string][] {
    return readdirSync(dir, { withFileTypes: true, recursive: true })
      .filter((e) => e.isFile() && e.name.endsWith('.ts'))
      .flatMap((e) => {
        const file = join(e.parentPath, e.name);
        return [...read(file).matchAll(/new ApiError\(\s*(\d{3}),\s*'([a-z_]+)'/g)].map((m): [string, number, string] => [
          m[2] ?? '',
          Number(m[1]),
          relative(ROOT, file),
        ]);
      });
  }

  test('every error the source throws has the status the table gives its code', () => {
    const thrown = thrownErrors(join(ROOT, 'src'));
    expect(thrown.length).toBeGreaterThan(8);
    const wrong = thrown.filter(([code, status]) => ERROR_STATUS[code as keyof typeof ERROR_STATUS] !== status);
    expect(wrong).toEqual([]);
  });
});

// ---- (3) links ----------------------------------------------------------------------------------

describe('links', () => {
  test.each([README, API_DOC].map((f) => [relative(ROOT, f), f]))('every relative link of %s resolves', (_name, file) => {
    const md = read(file);
    expect(allTokens(md).some((t) => t.type === 'link')).toBe(true);
    expect(brokenLinks(file, md)).toEqual([]);
  });

  test('README.md and src/ point to docs/api.md, never to an API.md the repository lacks', () => {
    const sources = readdirSync(join(ROOT, 'src'), { withFileTypes: true, recursive: true })
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name));
    const naming = [README, ...sources].filter((f) => /\bAPI\.md\b/.test(read(f))).map((f) => relative(ROOT, f));
    expect(naming).toEqual([]);
    expect(read(README)).toContain('(docs/api.md)');
  });
});
