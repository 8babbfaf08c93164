/**
 * Canonical forms of the four object kinds and the four target kinds, and `isWithin`.
 * Everything is compared in canonical form only: the seed's `within()` matched raw string
 * prefixes, so `/workspace/../etc/passwd` passed a `/workspace` object. Never again.
 */
import { err, ok, type Canonical, type CanonicalObject, type CanonicalTarget, type HostObject, type RawObject, type RawTarget, type Result } from './types.js';

const brand = <T>(v: T): Canonical<T> => v as Canonical<T>;

// ---- paths ----------------------------------------------------------------------------------

/**
 * docs/api.md: a path object is absolute; rejected when it contains a NUL byte, a `.` or `..` segment or
 * an empty segment; one trailing `/` is dropped; `/` is the whole filesystem.
 */
export function canonicalPathPrefix(prefix: string): Result<string> {
  if (!prefix.startsWith('/')) return err('must be an absolute path');
  if (prefix.includes('\0')) return err('must not contain a NUL byte');
  if (prefix === '/') return ok('/');
  const trimmed = prefix.endsWith('/') ? prefix.slice(0, -1) : prefix;
  for (const segment of trimmed.slice(1).split('/')) {
    if (segment === '') return err('must not contain an empty segment (//)');
    if (segment === '.' || segment === '..') return err('must not contain a . or .. segment');
  }
  return ok(trimmed);
}

/** A path target is resolved lexically (`.` and `..` applied, `..` at the root stays there). */
export function resolvePath(path: string): Result<string> {
  if (!path.startsWith('/')) return err('must be an absolute path');
  if (path.includes('\0')) return err('must not contain a NUL byte');
  const out: string[] = [];
  for (const segment of path.split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment === '..') out.pop();
    else out.push(segment);
  }
  return ok(`/${out.join('/')}`);
}

/** Whole-segment prefix match: `/a/b` covers `/a/b` and `/a/b/c`, never `/a/bc`. */
function isPathWithin(path: string, prefix: string): boolean {
  return prefix === '/' || path === prefix || path.startsWith(`${prefix}/`);
}

// ---- hosts ----------------------------------------------------------------------------------

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const NUMERIC_LABEL = /^(?:\d+|0x[0-9a-f]*)$/;
const PRINTABLE_ASCII = /^[\x21-\x7e]+$/;

function isCanonicalIpv4(name: string): boolean {
  const parts = name.split('.');
  return parts.length === 4 && parts.every((p) => /^(?:0|[1-9]\d{0,2})$/.test(p) && Number(p) <= 255);
}

/**
 * A DNS name, lower-cased; one trailing dot dropped. Only ASCII is accepted: an IDN must come as
 * its A-label (`xn--…`), so look-alike code points can never be mapped onto another name. A last
 * label that a URL parser would read as an IPv4 number must be a canonical dotted quad.
 */
export function canonicalHostName(name: string, options?: { wildcard: 'allow' }): Result<string> {
  if (name.startsWith('[')) return canonicalIpv6(name);
  if (!PRINTABLE_ASCII.test(name)) {
    return err('must be an ASCII DNS name (write an IDN as its xn-- A-label)');
  }
  let lower = name.toLowerCase();
  if (lower.endsWith('.')) lower = lower.slice(0, -1);
  if (lower.length === 0 || lower.length > 253) return err('must be 1 to 253 characters');
  const labels = lower.split('.');
  if (labels[0] === '*') {
    if (options?.wildcard !== 'allow') return err('must not be a wildcard');
    if (labels.length < 2) return err('a wildcard must be followed by a domain');
    labels.shift();
  }
  if (!labels.every((l) => LABEL.test(l))) {
    return err('must be dot-separated labels of a-z, 0-9 and -, each 1 to 63 characters');
  }
  const last = labels[labels.length - 1] ?? '';
  if (NUMERIC_LABEL.test(last)) {
    if (lower.startsWith('*.') || !isCanonicalIpv4(lower)) {
      return err('a numeric name must be a dotted-quad IPv4 address');
    }
  }
  return ok(lower);
}

function canonicalIpv6(name: string): Result<string> {
  if (!/^\[[0-9a-fA-F:.]+\]$/.test(name)) return err('must be a bracketed IPv6 address');
  try {
    return ok(new URL(`http://${name}/`).hostname);
  } catch {
    return err('must be a valid IPv6 address');
  }
}

function isHostNameWithin(name: string, pattern: string): boolean {
  if (!pattern.startsWith('*.')) return name === pattern;
  // docs/api.md: a wildcard `*.example.com` covers every name strictly below example.com, not example.com itself.
  const suffix = pattern.slice(1);
  const bare = name.startsWith('*.') ? name.slice(1) : name;
  return bare.endsWith(suffix) && (name.startsWith('*.') ? bare.length >= suffix.length : bare.length > suffix.length);
}

function isPortWithin(port: number | undefined, allowed: number | undefined): boolean {
  return allowed === undefined || port === allowed;
}

// ---- repos ----------------------------------------------------------------------------------

const REPO_PART = /^[a-z0-9_.-]{1,100}$/;

/** `host/owner/name`, compared case-insensitively (so kept lower-cased). */
export function canonicalRepo(name: string): Result<string> {
  const parts = name.split('/');
  if (parts.length !== 3) return err('must be host/owner/name');
  const [host = '', owner = '', repo = ''] = parts;
  const h = canonicalHostName(host);
  if (!h.ok) return err(`host ${h.error}`);
  for (const part of [owner.toLowerCase(), repo.toLowerCase()]) {
    if (!REPO_PART.test(part) || part === '.' || part === '..') {
      return err('owner and name must be 1 to 100 characters of a-z, 0-9, _, . and -');
    }
  }
  return ok(`${h.value}/${owner.toLowerCase()}/${repo.toLowerCase()}`);
}

// ---- URLs -----------------------------------------------------------------------------------

const UNRESERVED = /[A-Za-z0-9\-._~]/;

/**
 * Percent-encodings in a WHATWG-normalized path: unreserved characters decoded, the rest
 * upper-cased (RFC 3986 §6.2.2). An encoded `/`, `\` or NUL is refused: servers disagree on whether
 * it separates segments, so no prefix decision about it can be trusted.
 */
function normalizePercent(path: string): Result<string> {
  let bad = false;
  // A `%` that starts no escape is escaped first: else decoding `%%41` would form a new escape `%A…`.
  const out = path.replace(/%(?![0-9a-fA-F]{2})/g, '%25').replace(/%([0-9a-fA-F]{2})/g, (_m, hex: string) => {
    const ch = String.fromCharCode(parseInt(hex, 16));
    if (ch === '/' || ch === '\\' || ch === '\0') bad = true;
    return UNRESERVED.test(ch) ? ch : `%${hex.toUpperCase()}`;
  });
  return bad ? err('must not contain an encoded /, \\ or NUL') : ok(out);
}

/** One round of percent-decoding as a lenient server does it: each `%XX` to its byte, a `%` that starts no escape kept. */
const decodeOnce = (s: string): string => s.replace(/%([0-9a-fA-F]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)));
const MAX_DECODES = 4;

/**
 * Review: Tomcat, Jetty and Spring drop `;params` from each segment before resolving dot segments, so
 * `/v1/..;/admin` was granted under `/v1/` and served as `/admin`; a proxy or backend that decodes twice
 * reads `/v1/%252e%252e/admin` likewise, and `%252F` as `/`. A path segment of the WHATWG-parsed path is
 * refused when, decoded 0 to 4 times (and not changing on a 5th), with or without everything from its
 * first `;`, it reads as `.` or `..` or holds a `/`, `\` or NUL. Dot segments WHATWG resolves never get here.
 */
function checkSegmentReadings(pathname: string): Result<true> {
  for (const segment of pathname.split('/')) {
    for (let s = segment, round = 0; ; round++) {
      const semicolon = s.indexOf(';');
      const bare = semicolon === -1 ? s : s.slice(0, semicolon);
      if (bare === '.' || bare === '..') {
        return err('must not have a path segment that some servers read as . or .. (path parameters or double encoding)');
      }
      if (/[/\\\0]/.test(s)) return err('must not contain a doubly encoded /, \\ or NUL (%252F, %255C, %2500)');
      const next = decodeOnce(s);
      if (next === s) break;
      if (round === MAX_DECODES) return err(`must not have a path segment percent-encoded more than ${MAX_DECODES} times`);
      s = next;
    }
  }
  return ok(true);
}

/** A segment as written and decoded 1 to MAX_DECODES times. */
function readings(segment: string): string[] {
  const out = [segment];
  for (let s = decodeOnce(segment); out.length <= MAX_DECODES && s !== out[out.length - 1]; s = decodeOnce(s)) out.push(s);
  return out;
}

/** A `..` segment as WHATWG reads it: `..`, `.%2e`, `%2e.` or `%2e%2e`, in either case. */
const DOUBLE_DOT = /^(?:\.|%2e){2}$/i;

/**
 * Review: WHATWG keeps an empty segment and lets a `..` remove it, so `/v1/x//../admin` became
 * `/v1/x/admin` (under a `/v1/x/` prefix), while a server that merges slashes first (nginx, Tomcat)
 * serves `/v1/admin`; Tomcat reads `/v1/x/;/../admin` so too, once it has dropped the `;` parameters. `rawPath` is the path as written (after the authority, before `?` or `#`): an
 * empty segment before its last one, beside a `..` segment, is refused.
 */
function checkEmptyBesideDots(rawPath: string): Result<true> {
  const segments = rawPath.split('/').slice(1);
  // A segment of path parameters alone (`;x`, `%3B`) is empty to a server that strips them first.
  const empty = segments.slice(0, -1).some((s) => readings(s).some((r) => r === '' || r.startsWith(';')));
  return empty && segments.some((s) => DOUBLE_DOT.test(s))
    ? err('must not have an empty path segment (//) beside a .. segment: servers that merge slashes resolve the .. elsewhere')
    : ok(true);
}

/** A segment WHATWG resolves as `.` or `..` (`%2e` in either case for a dot), as RFC 3986 normalizers do. */
const DOT_SEGMENT = /^(?:\.|%2e){1,2}$/i;

/**
 * Attack review: WHATWG drops a segment that a following `..` cancels before the checks above see the
 * path, so `/v1/x/..;/../admin` became `/v1/x/admin` while a client that sends the text as written hands
 * Tomcat a path it serves as `/admin` (likewise `%2e%2e;`, `%252e%252e`, `y%2F..%2F..`). `rawPath` is the
 * path as written: each segment but the dot segments every parser resolves alike is held to the same
 * rules, an encoded `/`, `\` or NUL included.
 */
function checkWrittenSegments(rawPath: string): Result<true> {
  if (/%(?:2f|5c|00)/i.test(rawPath)) return err('must not contain an encoded /, \\ or NUL');
  return checkSegmentReadings(
    rawPath
      .split('/')
      .filter((s) => !DOT_SEGMENT.test(s))
      .join('/'),
  );
}

interface ParsedUrl {
  readonly origin: string;
  readonly path: string;
}

/** Characters the WHATWG parser strips or reads as `/` where other parsers do not: backslash, C0 controls, space, DEL. */
const AMBIGUOUS_URL_CHAR = /[\\\x00-\x20\x7f]/;
const DEFAULT_PORT: Readonly<Record<string, string>> = { 'http:': '80', 'https:': '443' };

/**
 * The authority as written (between `//` and the first `/`, `?` or `#`) must be what the WHATWG
 * parser read as host and port. Else `http://api.example.com\@169.254.169.254/` would be judged as
 * api.example.com while a client with another parser calls 169.254.169.254; likewise for `0x7f.1`,
 * `%2e` in a host, or a Unicode host mapped onto an ASCII one.
 */
function checkAuthority(raw: string, u: URL): Result<true> {
  const m = /^https?:\/\/([^/?#]*)/i.exec(raw);
  if (m === null) return err('must start with http:// or https://');
  // ASCII only, as for host objects: full-Unicode lower-casing maps some letters onto ASCII ones (the
  // Kelvin sign K onto k), so a Unicode authority could compare equal to a host it was never written as.
  if (!PRINTABLE_ASCII.test(m[1] ?? '')) return err('must have an ASCII host (write an IDN as its xn-- A-label)');
  const authority = (m[1] ?? '').toLowerCase();
  if (authority.includes('@')) return err('must not contain credentials');
  const colon = authority.startsWith('[') ? authority.indexOf(':', authority.indexOf(']')) : authority.indexOf(':');
  const host = colon === -1 ? authority : authority.slice(0, colon);
  const port = colon === -1 ? null : authority.slice(colon + 1);
  if (host !== u.hostname) return err(`the host must be written as URL parsers read it (${u.hostname})`);
  if (port !== null && port !== (u.port === '' ? DEFAULT_PORT[u.protocol] : u.port)) return err('the port must be written as a plain number');
  return ok(true);
}

function parseHttpUrl(raw: string): Result<ParsedUrl> {
  if (AMBIGUOUS_URL_CHAR.test(raw)) return err('must not contain a backslash, a space or a control character');
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return err('must be an absolute URL');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return err('must be an http or https URL');
  if (u.username !== '' || u.password !== '') return err('must not contain credentials');
  if (u.hostname === '') return err('must have a host');
  const authority = checkAuthority(raw, u);
  if (!authority.ok) return authority;
  const path = normalizePercent(u.pathname);
  if (!path.ok) return path;
  const segments = checkSegmentReadings(u.pathname);
  if (!segments.ok) return segments;
  const rawPath = /^https?:\/\/[^/?#]*([^?#]*)/i.exec(raw)?.[1] ?? '';
  const empties = checkEmptyBesideDots(rawPath);
  if (!empties.ok) return empties;
  const written = checkWrittenSegments(rawPath);
  if (!written.ok) return written;
  return ok({ origin: `${u.protocol}//${u.host}`, path: path.value });
}

/** An absolute http(s) URL prefix: WHATWG-normalized origin and path; no query, fragment or credentials. */
export function canonicalUrlPrefix(raw: string): Result<string> {
  if (raw.includes('?') || raw.includes('#')) return err('a URL prefix must not have a query or fragment');
  const parsed = parseHttpUrl(raw);
  return parsed.ok ? ok(parsed.value.origin + parsed.value.path) : parsed;
}

/** A URL target keeps only origin and path: the query and fragment do not decide where a call goes. */
export function canonicalUrlTarget(raw: string): Result<string> {
  const parsed = parseHttpUrl(raw);
  return parsed.ok ? ok(parsed.value.origin + parsed.value.path) : parsed;
}

function splitCanonicalUrl(url: string): ParsedUrl {
  const slash = url.indexOf('/', url.indexOf('//') + 2);
  return { origin: url.slice(0, slash), path: url.slice(slash) };
}

function isUrlWithin(url: string, prefix: string): boolean {
  const u = splitCanonicalUrl(url);
  const p = splitCanonicalUrl(prefix);
  if (u.origin !== p.origin) return false;
  if (p.path.endsWith('/')) return u.path.startsWith(p.path);
  return u.path === p.path || u.path.startsWith(`${p.path}/`);
}

// ---- objects and targets --------------------------------------------------------------------

function canonicalPort(port: number | undefined): Result<number | undefined> {
  if (port === undefined) return ok(undefined);
  return Number.isInteger(port) && port >= 1 && port <= 65535 ? ok(port) : err('port must be an integer 1 to 65535');
}

function hostWithPort(name: string, port: number | undefined): HostObject {
  return port === undefined ? { kind: 'host', name } : { kind: 'host', name, port };
}

/** Canonicalizes one object reference of a capability (docs/api.md "Objects and targets"). */
export function canonicalObject(o: RawObject): Result<CanonicalObject> {
  switch (o.kind) {
    case 'path': {
      const p = canonicalPathPrefix(o.prefix);
      return p.ok ? ok(brand({ kind: 'path', prefix: p.value })) : p;
    }
    case 'host': {
      const n = canonicalHostName(o.name, { wildcard: 'allow' });
      if (!n.ok) return n;
      const port = canonicalPort(o.port);
      return port.ok ? ok(brand(hostWithPort(n.value, port.value))) : port;
    }
    case 'repo': {
      const r = canonicalRepo(o.name);
      return r.ok ? ok(brand({ kind: 'repo', name: r.value })) : r;
    }
    case 'url': {
      const u = canonicalUrlPrefix(o.prefix);
      return u.ok ? ok(brand({ kind: 'url', prefix: u.value })) : u;
    }
  }
}

/** Canonicalizes the target of an approve request (docs/api.md "Objects and targets"). */
export function canonicalTarget(t: RawTarget): Result<CanonicalTarget> {
  switch (t.kind) {
    case 'path': {
      const p = resolvePath(t.path);
      return p.ok ? ok(brand({ kind: 'path', path: p.value })) : p;
    }
    case 'host': {
      const n = canonicalHostName(t.name);
      if (!n.ok) return n;
      const port = canonicalPort(t.port);
      if (!port.ok) return port;
      return ok(brand(port.value === undefined ? { kind: 'host', name: n.value } : { kind: 'host', name: n.value, port: port.value }));
    }
    case 'repo': {
      const r = canonicalRepo(t.name);
      return r.ok ? ok(brand({ kind: 'repo', name: r.value })) : r;
    }
    case 'url': {
      const u = canonicalUrlTarget(t.url);
      return u.ok ? ok(brand({ kind: 'url', url: u.value })) : u;
    }
  }
}

/** Does the target lie within the object? Both canonical; kinds never cross. */
export function isWithin(target: CanonicalTarget, object: CanonicalObject): boolean {
  switch (target.kind) {
    case 'path':
      return object.kind === 'path' && isPathWithin(target.path, object.prefix);
    case 'host':
      return object.kind === 'host' && isPortWithin(target.port, object.port) && isHostNameWithin(target.name, object.name);
    case 'repo':
      return object.kind === 'repo' && target.name === object.name;
    case 'url':
      return object.kind === 'url' && isUrlWithin(target.url, object.prefix);
  }
}

/** Does the child object cover nothing that the parent object does not? (docs/api.md "Attenuation rule") */
export function isObjectWithin(child: CanonicalObject, parent: CanonicalObject): boolean {
  switch (child.kind) {
    case 'path':
      return parent.kind === 'path' && isPathWithin(child.prefix, parent.prefix);
    case 'host':
      return parent.kind === 'host' && isPortWithin(child.port, parent.port) && isHostNameWithin(child.name, parent.name);
    case 'repo':
      return parent.kind === 'repo' && child.name === parent.name;
    case 'url':
      return parent.kind === 'url' && isUrlWithin(child.prefix, parent.prefix);
  }
}

/** Human-readable form of an object or target, for reasons and violation details. */
export function describe(x: CanonicalObject | CanonicalTarget): string {
  switch (x.kind) {
    case 'path':
      return 'prefix' in x ? `path ${x.prefix}` : `path ${x.path}`;
    case 'host':
      return `host ${x.name}${x.port === undefined ? '' : `:${x.port}`}`;
    case 'repo':
      return `repo ${x.name}`;
    case 'url':
      return 'prefix' in x ? `url ${x.prefix}` : `url ${x.url}`;
  }
}
