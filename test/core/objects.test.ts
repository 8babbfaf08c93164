/**
 * Canonical forms of the four object kinds and the four target kinds (API.md "O, objects" and
 * "POST /v1/approve"), and `isWithin` / `isObjectWithin` on them: whole-segment paths, lexically
 * resolved path targets, wildcard hosts strictly below their domain, optional ports,
 * case-insensitive repos and WHATWG-normalized URL prefixes matched at a segment boundary.
 */
import { describe, expect, test } from 'vitest';
import { canonicalObject, canonicalTarget, isObjectWithin, isWithin } from '../../src/core/objects.js';
import type { CanonicalObject, CanonicalTarget, RawObject, RawTarget } from '../../src/core/types.js';

function object(raw: RawObject): CanonicalObject {
  const c = canonicalObject(raw);
  if (!c.ok) throw new Error(`test object ${JSON.stringify(raw)} is not valid: ${c.error}`);
  return c.value;
}

function target(raw: RawTarget): CanonicalTarget {
  const c = canonicalTarget(raw);
  if (!c.ok) throw new Error(`test target ${JSON.stringify(raw)} is not valid: ${c.error}`);
  return c.value;
}

const path = (prefix: string): RawObject => ({ kind: 'path', prefix });
const host = (name: string, port?: number): RawObject => (port === undefined ? { kind: 'host', name } : { kind: 'host', name, port });
const repo = (name: string): RawObject => ({ kind: 'repo', name });
const url = (prefix: string): RawObject => ({ kind: 'url', prefix });

const pathT = (p: string): RawTarget => ({ kind: 'path', path: p });
const hostT = (name: string, port?: number): RawTarget => (port === undefined ? { kind: 'host', name } : { kind: 'host', name, port });
const repoT = (name: string): RawTarget => ({ kind: 'repo', name });
const urlT = (u: string): RawTarget => ({ kind: 'url', url: u });

/**
 * URLs that the WHATWG parser reads otherwise than the text says, or than other parsers read them
 * (review: `http://api.example.com\\@169.254.169.254/` was granted under `http://api.example.com/`).
 */
const AMBIGUOUS_URLS: [string, string][] = [
  ['a backslash before an @', 'http://api.example.com\\@169.254.169.254/'],
  ['a backslash for the slashes', 'https:\\\\a.example\\v1'],
  ['a backslash in the path', 'https://a.example/v1\\..\\admin'],
  ['a tab in the host', 'https://api.exa\tmple.com/'],
  ['a newline in the path', 'https://a.example/v1/\n/x'],
  ['a leading space', ' https://a.example/'],
  ['a space in the path', 'https://a.example/a b'],
  ['a DEL', 'https://a.example/\x7f'],
  ['an @ in the authority', 'https://api.example.com@169.254.169.254/'],
  ['an empty userinfo', 'https://@a.example/'],
  ['a hex IPv4 host', 'http://0x7f.0.0.1/'],
  ['a single-number IPv4 host', 'http://2852039166/'],
  ['a percent-encoded host', 'https://a%2Eexample/'],
  ['a Unicode host', 'https://bücher.de/'],
  ['a fullwidth host', 'https://ａ.example/'],
  // Review: full-Unicode lower-casing turns the Kelvin sign into an ASCII k.
  ['a Kelvin sign for a k', 'http://\u212Aexample.com/'],
  ['no slashes after the scheme', 'http:a.example/'],
  ['one slash after the scheme', 'http:/a.example/'],
  ['three slashes after the scheme', 'http:///a.example/'],
  ['an empty port', 'https://a.example:/v1'],
  ['a port with a leading zero', 'https://a.example:0443/v1'],
  ['a non-canonical IPv6 host', 'https://[::FFFF:1.2.3.4]/'],
];

const READS_AS_DOTS = /some servers read as \. or \.\./;
const DOUBLY_ENCODED = /doubly encoded \/, \\ or NUL/;
const ENCODED_TOO_OFTEN = /percent-encoded more than 4 times/;
const EMPTY_BESIDE_DOTS = /empty path segment \(\/\/\) beside a \.\. segment/;

/**
 * Review: path segments WHATWG keeps as they are but a backend reads as `.` or `..`, or with a `/`, `\`
 * or NUL, after dropping `;params` (Tomcat, Jetty, Spring) or decoding twice:
 * `https://api.example.com/v1/..;/admin` was granted under `https://api.example.com/v1/` and Tomcat
 * serves `/admin`. Refused in a prefix and in a target alike.
 */
const SEGMENT_READINGS: [string, string, RegExp][] = [
  ['.. with an empty path parameter', 'https://api.example.com/v1/..;/admin', READS_AS_DOTS],
  ['. with a path parameter', 'https://api.example.com/v1/.;x/admin', READS_AS_DOTS],
  ['.. with a session id', 'https://api.example.com/v1/..;jsessionid=1/admin', READS_AS_DOTS],
  ['.. with a parameter, last', 'https://api.example.com/v1/..;x', READS_AS_DOTS],
  ['encoded .. with a path parameter', 'https://api.example.com/v1/%2e%2e;/admin', READS_AS_DOTS],
  ['half-encoded .. with a path parameter', 'https://api.example.com/v1/.%2E;x/admin', READS_AS_DOTS],
  ['.. with an encoded ;', 'https://api.example.com/v1/..%3B/admin', READS_AS_DOTS],
  ['encoded .. with an encoded ;', 'https://api.example.com/v1/%2e%2e%3bx/admin', READS_AS_DOTS],
  ['.. with a doubly encoded ;', 'https://api.example.com/v1/..%253B/admin', READS_AS_DOTS],
  ['doubly encoded ..', 'https://api.example.com/v1/%252e%252e/admin', READS_AS_DOTS],
  ['doubly encoded .. in upper case', 'https://api.example.com/v1/%252E%252E/admin', READS_AS_DOTS],
  ['half doubly encoded ..', 'https://api.example.com/v1/.%252e/admin', READS_AS_DOTS],
  ['doubly encoded .', 'https://api.example.com/v1/%252e/admin', READS_AS_DOTS],
  ['triply encoded ..', 'https://api.example.com/v1/%25252e%25252e/admin', READS_AS_DOTS],
  ['doubly encoded .. with a path parameter', 'https://api.example.com/v1/%252e%252e;x/admin', READS_AS_DOTS],
  ['lone % signs that decode twice to ..', 'https://api.example.com/v1/%%32%65%%32%65/admin', READS_AS_DOTS],
  ['a doubly encoded /', 'https://api.example.com/v1/x%252F..%252F..%252Fadmin', DOUBLY_ENCODED],
  ['a doubly encoded / in lower case', 'https://api.example.com/v1/%252e%252e%252fadmin', DOUBLY_ENCODED],
  ['a triply encoded /', 'https://api.example.com/v1/x%25252F', DOUBLY_ENCODED],
  ['a doubly encoded \\', 'https://api.example.com/v1/..%255Cadmin', DOUBLY_ENCODED],
  ['a doubly encoded NUL', 'https://api.example.com/v1/x%2500', DOUBLY_ENCODED],
  ['.. with a doubly encoded NUL', 'https://api.example.com/v1/..%2500/admin', DOUBLY_ENCODED],
  ['lone % signs that decode twice to /', 'https://api.example.com/v1/%%32%46', DOUBLY_ENCODED],
  ['a character encoded five times', 'https://api.example.com/v1/%252525252541', ENCODED_TOO_OFTEN],
  ['an empty segment that a .. removes', 'https://api.example.com/v1/x//../admin', EMPTY_BESIDE_DOTS],
  ['an empty segment that a .. at the end removes', 'https://api.example.com/v1/x//..', EMPTY_BESIDE_DOTS],
  ['an empty segment with an encoded ..', 'https://api.example.com/v1/x//%2E%2e/admin', EMPTY_BESIDE_DOTS],
  ['an empty segment after a .. ', 'https://api.example.com/v1/x/../y//z', EMPTY_BESIDE_DOTS],
  ['a segment of parameters alone that a .. removes', 'https://api.example.com/v1/x/;/../admin', EMPTY_BESIDE_DOTS],
  ['a segment of a session id alone that a .. removes', 'https://api.example.com/v1/x/;jsessionid=1/../admin', EMPTY_BESIDE_DOTS],
  ['a parameters segment two levels down', 'https://api.example.com/v1/x/a/;/../../admin', EMPTY_BESIDE_DOTS],
  ['an encoded parameters segment', 'https://api.example.com/v1/x/%3b/../admin', EMPTY_BESIDE_DOTS],
];

describe('canonicalObject accepts and normalizes', () => {
  test.each<[string, RawObject, RawObject]>([
    ['an absolute path as is', path('/workspace/traj-1'), path('/workspace/traj-1')],
    ['a path, dropping one trailing slash', path('/workspace/traj-1/'), path('/workspace/traj-1')],
    ['"/" as the whole filesystem', path('/'), path('/')],
    ['a path whose segments only look like dots', path('/a/.../.b/c.'), path('/a/.../.b/c.')],
    ['a path with spaces and non-ASCII', path('/ä b/%2e%2e'), path('/ä b/%2e%2e')],
    ['a host, lower-cased', host('API.Example.COM'), host('api.example.com')],
    ['a host, dropping one trailing dot', host('api.example.com.'), host('api.example.com')],
    ['a host with a port', host('api.example.com', 443), host('api.example.com', 443)],
    ['a wildcard host, lower-cased', host('*.Example.com'), host('*.example.com')],
    ['a wildcard host over a deeper domain', host('*.eu.example.com', 8443), host('*.eu.example.com', 8443)],
    ['an IDN as its A-label', host('xn--bcher-kva.de'), host('xn--bcher-kva.de')],
    ['a dotted-quad IPv4 host', host('10.0.0.1'), host('10.0.0.1')],
    ['a bracketed IPv6 host, WHATWG-serialized', host('[::FFFF:1.2.3.4]'), host('[::ffff:102:304]')],
    ['a repo, lower-cased', repo('GitHub.com/Org/Repo'), repo('github.com/org/repo')],
    ['a repo with . _ - in its parts', repo('github.com/my_org/repo.js-x'), repo('github.com/my_org/repo.js-x')],
    ['a URL, scheme and host lower-cased, default port dropped', url('HTTPS://API.Example.COM:443/v1/'), url('https://api.example.com/v1/')],
    ['a URL with a non-default port', url('http://api.example.com:8080/v1'), url('http://api.example.com:8080/v1')],
    ['a URL without a path, as the origin root', url('https://api.example.com'), url('https://api.example.com/')],
    ['a URL, dot segments resolved', url('https://a.example/v1/./x/../y'), url('https://a.example/v1/y')],
    ['a URL, encoded dot segments resolved', url('https://a.example/v1/%2e%2E/y'), url('https://a.example/y')],
    ['a URL, unreserved escapes decoded and others upper-cased', url('https://a.example/%7e%41%3f'), url('https://a.example/~A%3F')],
    ['a URL, a lone % escaped so that decoding forms no new escape', url('https://a.example/%%41b/%%34%31'), url('https://a.example/%25Ab/%2541')],
    ['a URL with a path parameter that is no dot segment', url('https://a.example/v1/items;v=2/'), url('https://a.example/v1/items;v=2/')],
    [
      'a URL whose segments only look like dots with parameters',
      url('https://a.example/v1/...;x/..a;b/a;../;/%3B..'),
      url('https://a.example/v1/...;x/..a;b/a;../;/%3B..'),
    ],
    ['a URL with an escaped %', url('https://a.example/v1/100%25'), url('https://a.example/v1/100%25')],
    ['a URL with a doubly encoded harmless character', url('https://a.example/v1/a%2541'), url('https://a.example/v1/a%2541')],
    ['a URL with a character encoded four times', url('https://a.example/v1/%25252541'), url('https://a.example/v1/%25252541')],
    ['a URL, .. after a path parameter resolved', url('https://a.example/v1/x;y/../z'), url('https://a.example/v1/z')],
    ['a URL with an IPv6 host', url('https://[::1]:8443/x'), url('https://[::1]:8443/x')],
    ['a URL with an IDN host written as its A-label', url('https://xn--bcher-kva.de/'), url('https://xn--bcher-kva.de/')],
    ['a URL host with one trailing dot, kept', url('https://a.example./v1'), url('https://a.example./v1')],
  ])('%s', (_name, raw, expected) => {
    expect(canonicalObject(raw)).toEqual({ ok: true, value: expected });
  });
});

describe('canonicalObject rejects', () => {
  test.each<[string, RawObject]>([
    ['a relative path', path('workspace/traj-1')],
    ['an empty path', path('')],
    ['a path with a NUL byte', path('/work\0space')],
    ['a path with a . segment', path('/workspace/./traj-1')],
    ['a path with a .. segment', path('/workspace/../etc')],
    ['a path ending in a . segment', path('/workspace/.')],
    ['a path ending in a .. segment', path('/workspace/..')],
    ['a path ending in a . segment and a slash', path('/workspace/./')],
    ['"/.."', path('/..')],
    ['"//"', path('//')],
    ['a path with an empty segment', path('/workspace//traj-1')],
    ['a path starting with an empty segment', path('//workspace')],
    ['a path with two trailing slashes', path('/workspace//')],
    ['a host that is only a wildcard', host('*')],
    ['a wildcard that is not the leftmost label', host('api.*.example.com')],
    ['a wildcard that is part of a label', host('*api.example.com')],
    ['a double wildcard', host('*.*.example.com')],
    ['a wildcard as the last label', host('example.*')],
    ['a non-ASCII host name', host('bücher.de')],
    ['an empty host name', host('')],
    ['a host name with an empty label', host('api..example.com')],
    ['a label starting with -', host('-api.example.com')],
    ['a label with _', host('api_v1.example.com')],
    ['a label of 64 characters', host(`${'a'.repeat(64)}.example.com`)],
    ['a non-canonical IPv4 address', host('010.0.0.1')],
    ['a numeric last label that is no dotted quad', host('example.123')],
    ['a wildcard over an IPv4 address', host('*.1.2.3.4')],
    ['port 0', host('api.example.com', 0)],
    ['port 65536', host('api.example.com', 65536)],
    ['a fractional port', host('api.example.com', 443.5)],
    ['a repo without a name', repo('github.com/org')],
    ['a repo with four parts', repo('github.com/org/repo/extra')],
    ['a repo named ..', repo('github.com/org/..')],
    ['a repo with an empty owner', repo('github.com//repo')],
    ['a repo with a bad host', repo('git hub.com/org/repo')],
    ['a repo with a space in its name', repo('github.com/org/my repo')],
    ['a non-http URL', url('ftp://a.example/')],
    ['a relative URL', url('/v1/')],
    ['a URL with credentials', url('https://user:pw@a.example/')],
    ['a URL prefix with a query', url('https://a.example/v1?x=1')],
    ['a URL prefix with a fragment', url('https://a.example/v1#x')],
    ['a URL with an encoded slash', url('https://a.example/v1%2fadmin')],
    ['a URL with an encoded backslash', url('https://a.example/v1%5Cadmin')],
    ['a URL with an encoded NUL', url('https://a.example/v1%00')],
    ...AMBIGUOUS_URLS.map(([name, u]): [string, RawObject] => [name, url(u)]),
  ])('%s', (_name, raw) => {
    expect(canonicalObject(raw).ok).toBe(false);
  });
});

describe('canonicalTarget', () => {
  test.each<[string, RawTarget, RawTarget]>([
    ['a path target, .. applied', pathT('/workspace/../etc/passwd'), pathT('/etc/passwd')],
    ['a path target, . and empty segments and the trailing slash dropped', pathT('/a/./b//c/'), pathT('/a/b/c')],
    ['a path target, .. at the root stays at the root', pathT('/a/../../..'), pathT('/')],
    ['a path target, "/.." as the root', pathT('/..'), pathT('/')],
    ['a path target that only looks like dots', pathT('/a/.../b'), pathT('/a/.../b')],
    ['a host target, lower-cased', hostT('API.Example.com.'), hostT('api.example.com')],
    ['a host target with a port', hostT('api.example.com', 443), hostT('api.example.com', 443)],
    ['a repo target, lower-cased', repoT('GitHub.com/Org/Repo'), repoT('github.com/org/repo')],
    ['a URL target, query and fragment dropped', urlT('https://a.example/v1/x?y=1#z'), urlT('https://a.example/v1/x')],
    ['a URL target, normalized as a prefix is', urlT('HTTPS://A.example:443/v1/./x/../%7Ey'), urlT('https://a.example/v1/~y')],
    ['a URL target with a path parameter', urlT('https://a.example/v1/items;v=2?x=1'), urlT('https://a.example/v1/items;v=2')],
    ['a URL target with an escaped %', urlT('https://a.example/v1/100%25'), urlT('https://a.example/v1/100%25')],
    ['a URL target with a doubly encoded harmless character', urlT('https://a.example/v1/a%2541'), urlT('https://a.example/v1/a%2541')],
    ['a URL target with an empty segment and no ..', urlT('https://a.example/v1//x/'), urlT('https://a.example/v1//x/')],
    ['a URL target with parameters and a .. but no empty segment', urlT('https://a.example/v1/items;v=2/a/../b'), urlT('https://a.example/v1/items;v=2/b')],
    ['a URL target with // and .. only in its query', urlT('https://a.example/v1/x/../y?next=//..'), urlT('https://a.example/v1/y')],
  ])('normalizes %s', (_name, raw, expected) => {
    expect(canonicalTarget(raw)).toEqual({ ok: true, value: expected });
  });

  test.each<[string, RawTarget]>([
    ['a relative path target', pathT('etc/passwd')],
    ['a path target with a NUL byte', pathT('/workspace/a\0b')],
    ['a wildcard host target', hostT('*.example.com')],
    ['a host target with port 0', hostT('api.example.com', 0)],
    ['a non-ASCII host target', hostT('bücher.de')],
    ['a repo target with two parts', repoT('github.com/org')],
    ['a non-http URL target', urlT('file:///etc/passwd')],
    ['a URL target with credentials', urlT('https://u@a.example/')],
    ['a URL target with an encoded slash', urlT('https://a.example/v1/..%2Fadmin')],
    ...AMBIGUOUS_URLS.map(([name, u]): [string, RawTarget] => [name, urlT(u)]),
  ])('rejects %s', (_name, raw) => {
    expect(canonicalTarget(raw).ok).toBe(false);
  });
});

describe('URL path segments that some servers read as . or .. or with a / are refused', () => {
  test.each(SEGMENT_READINGS)('as a prefix: %s', (_name, u, reason) => {
    expect(canonicalObject(url(u))).toEqual({ ok: false, error: expect.stringMatching(reason) });
  });
  test.each(SEGMENT_READINGS)('as a target: %s', (_name, u, reason) => {
    expect(canonicalTarget(urlT(u))).toEqual({ ok: false, error: expect.stringMatching(reason) });
  });
});

/**
 * Attack review: WHATWG drops a segment that a following `..` cancels before the readings above are
 * checked, so `https://api.example.com/v1/x/..;/../admin` became `/v1/x/admin` (granted under
 * `/v1/x/`) while a client that sends the text as written (Go, Java, Node's http.request) hands
 * Tomcat `/v1/x/..;/../admin`, which it serves as `/admin`. docs/api.md refuses such a segment
 * wherever it stands; so is an encoded `/` that a `..` erases.
 */
const ERASED_SEGMENTS: [string, string][] = [
  ['.. with a path parameter', 'https://api.example.com/v1/x/..;/../admin'],
  ['encoded .. with a path parameter', 'https://api.example.com/v1/x/%2e%2e;/../admin'],
  ['.. with an encoded ;', 'https://api.example.com/v1/x/..%3B/../admin'],
  ['encoded . with a path parameter', 'https://api.example.com/v1/x/y/%2e;/../../admin'],
  ['doubly encoded ..', 'https://api.example.com/v1/x/%252e%252e/../admin'],
  ['an encoded / beside ..', 'https://api.example.com/v1/x/y%2F..%2F..%2Fadmin/..'],
  ['a doubly encoded /', 'https://api.example.com/v1/x/y%252F..%252F..%252Fadmin/..'],
];

describe('a segment some servers read as .. or with a / is refused even when a later .. erases it', () => {
  test.each(ERASED_SEGMENTS)('as a target: %s', (_name, u) => {
    expect(canonicalTarget(urlT(u)).ok).toBe(false);
  });
  test.each(ERASED_SEGMENTS)('as a prefix: %s', (_name, u) => {
    expect(canonicalObject(url(u)).ok).toBe(false);
  });
  test.each<[string, string, string]>([
    ['a plain ..', 'https://api.example.com/v1/x/y/../z', 'https://api.example.com/v1/x/z'],
    ['an encoded ..', 'https://api.example.com/v1/x/y/%2E%2e/z', 'https://api.example.com/v1/x/z'],
    ['a half-encoded ..', 'https://api.example.com/v1/x/y/.%2e/z', 'https://api.example.com/v1/x/z'],
    ['an encoded .', 'https://api.example.com/v1/x/%2e/z', 'https://api.example.com/v1/x/z'],
    ['a parameter on a plain segment that a .. erases', 'https://api.example.com/v1/x/y;v=2/../z', 'https://api.example.com/v1/x/z'],
  ])('dot segments every parser resolves alike still resolve: %s', (_name, u, expected) => {
    expect(canonicalTarget(urlT(u))).toEqual({ ok: true, value: { kind: 'url', url: expected } });
  });
});

describe('isWithin', () => {
  test.each<[string, RawTarget, RawObject, boolean]>([
    ['the path itself', pathT('/workspace/traj-1'), path('/workspace/traj-1'), true],
    ['a path below', pathT('/workspace/traj-1/x/y'), path('/workspace/traj-1'), true],
    ['a sibling sharing the prefix string', pathT('/workspace/traj-10'), path('/workspace/traj-1'), false],
    ['a file of a sibling sharing the prefix string', pathT('/workspace/traj-10/x'), path('/workspace/traj-1'), false],
    ['a parent of the prefix', pathT('/workspace'), path('/workspace/traj-1'), false],
    ['a path leaving the prefix by ..', pathT('/workspace/../etc/passwd'), path('/workspace'), false],
    ['a path leaving into a sibling by ..', pathT('/workspace/traj-1/../traj-10/x'), path('/workspace/traj-1'), false],
    ['a path leaving and coming back by ..', pathT('/workspace/traj-1/../traj-1/x'), path('/workspace/traj-1'), true],
    ['a path with . and // inside the prefix', pathT('/workspace/./traj-1//x'), path('/workspace/traj-1'), true],
    ['a path under a prefix given with a trailing slash', pathT('/workspace/traj-1'), path('/workspace/traj-1/'), true],
    ['any path under "/"', pathT('/etc/passwd'), path('/'), true],
    ['the root under "/"', pathT('/..'), path('/'), true],
    ['the same host', hostT('api.example.com'), host('api.example.com'), true],
    ['the same host in another case', hostT('API.EXAMPLE.COM'), host('api.example.com'), true],
    ['the same host with a trailing dot', hostT('api.example.com.'), host('api.example.com'), true],
    ['another host', hostT('www.example.com'), host('api.example.com'), false],
    ['a subdomain of a plain host', hostT('x.api.example.com'), host('api.example.com'), false],
    ['any port when the object sets none', hostT('api.example.com', 8443), host('api.example.com'), true],
    ['the object port', hostT('api.example.com', 443), host('api.example.com', 443), true],
    ['another port', hostT('api.example.com', 8443), host('api.example.com', 443), false],
    ['no port when the object sets one', hostT('api.example.com'), host('api.example.com', 443), false],
    ['a name one label below a wildcard', hostT('api.example.com'), host('*.example.com'), true],
    ['a name two labels below a wildcard', hostT('a.b.example.com'), host('*.example.com'), true],
    ['the wildcard domain itself', hostT('example.com'), host('*.example.com'), false],
    ['a name ending in the domain without a dot', hostT('badexample.com'), host('*.example.com'), false],
    ['a name with the domain inside it', hostT('example.com.evil.org'), host('*.example.com'), false],
    ['a wildcard host on another port', hostT('api.example.com', 80), host('*.example.com', 443), false],
    ['the same repo in another case', repoT('GitHub.com/Org/Repo'), repo('github.com/org/repo'), true],
    ['a repo whose name extends the object name', repoT('github.com/org/repo2'), repo('github.com/org/repo'), false],
    ['a repo of another owner', repoT('github.com/other/repo'), repo('github.com/org/repo'), false],
    ['a URL below a prefix ending in /', urlT('https://api.example.com/v1/x'), url('https://api.example.com/v1/'), true],
    ['a URL with query and fragment below a prefix', urlT('https://api.example.com/v1/x?y=1#z'), url('https://api.example.com/v1/'), true],
    ['a URL in another case with the default port', urlT('HTTPS://API.example.com:443/v1/x'), url('https://api.example.com/v1/'), true],
    ['the prefix path without its trailing /', urlT('https://api.example.com/v1'), url('https://api.example.com/v1/'), false],
    ['the prefix path itself', urlT('https://api.example.com/v1'), url('https://api.example.com/v1'), true],
    ['a segment below a prefix without /', urlT('https://api.example.com/v1/x'), url('https://api.example.com/v1'), true],
    ['a sibling sharing the prefix string', urlT('https://api.example.com/v10'), url('https://api.example.com/v1'), false],
    ['a URL leaving the prefix by ..', urlT('https://api.example.com/v1/../admin'), url('https://api.example.com/v1/'), false],
    ['a URL leaving the prefix by encoded ..', urlT('https://api.example.com/v1/%2e%2e/admin'), url('https://api.example.com/v1/'), false],
    ['a URL with a path parameter below a prefix', urlT('https://api.example.com/v1/items;v=2'), url('https://api.example.com/v1/'), true],
    ['a URL with a doubly encoded harmless character below a prefix', urlT('https://api.example.com/v1/a%2541'), url('https://api.example.com/v1/'), true],
    ['a URL with an escaped unreserved character', urlT('https://api.example.com/v1/%7Euser/x'), url('https://api.example.com/v1/~user'), true],
    ['a URL on another scheme', urlT('http://api.example.com/v1/x'), url('https://api.example.com/v1/'), false],
    ['a URL on another port', urlT('https://api.example.com:8443/v1/x'), url('https://api.example.com/v1/'), false],
    ['a URL on a host extending the prefix host', urlT('https://api.example.com.evil.org/v1/x'), url('https://api.example.com/v1/'), false],
    ['a URL quoting the prefix in its path', urlT('https://evil.org/https://api.example.com/v1/'), url('https://api.example.com/v1/'), false],
    ['any URL of the origin under its root', urlT('https://api.example.com/anything'), url('https://api.example.com'), true],
    ['a path target against a URL object', pathT('/v1/x'), url('https://api.example.com/v1/'), false],
    ['a host target against a path object', hostT('workspace'), path('/'), false],
    ['a repo target against a host object', repoT('github.com/org/repo'), host('github.com'), false],
    ['a URL target against a host object', urlT('https://api.example.com/'), host('api.example.com'), false],
  ])('%s', (_name, t, o, expected) => {
    expect(isWithin(target(t), object(o))).toBe(expected);
  });
});

describe('isObjectWithin', () => {
  test.each<[string, RawObject, RawObject, boolean]>([
    ['the same path', path('/a'), path('/a'), true],
    ['a path below', path('/a/b'), path('/a'), true],
    ['a sibling sharing the prefix string', path('/ab'), path('/a'), false],
    ['"/" under a path', path('/'), path('/a'), false],
    ['a path under "/"', path('/a'), path('/'), true],
    ['a plain host under a wildcard', host('api.example.com'), host('*.example.com'), true],
    ['a narrower wildcard under a wildcard', host('*.eu.example.com'), host('*.example.com'), true],
    ['the same wildcard', host('*.example.com'), host('*.example.com'), true],
    ['a wider wildcard under a wildcard', host('*.example.com'), host('*.eu.example.com'), false],
    ['the wildcard domain itself under the wildcard', host('example.com'), host('*.example.com'), false],
    ['a wildcard under its domain', host('*.example.com'), host('example.com'), false],
    ['a wildcard under one of its names', host('*.example.com'), host('api.example.com'), false],
    ['a host with a port under one without', host('api.example.com', 443), host('api.example.com'), true],
    ['a host without a port under one with', host('api.example.com'), host('api.example.com', 443), false],
    ['a host on another port', host('api.example.com', 80), host('api.example.com', 443), false],
    ['a host with a port under a wildcard with that port', host('api.example.com', 443), host('*.example.com', 443), true],
    ['the same repo', repo('github.com/Org/Repo'), repo('github.com/org/repo'), true],
    ['another repo', repo('github.com/org/repo2'), repo('github.com/org/repo'), false],
    ['a URL prefix below', url('https://a.example/v1/x'), url('https://a.example/v1/'), true],
    ['a URL prefix with / under the same one without', url('https://a.example/v1/'), url('https://a.example/v1'), true],
    ['a URL prefix without / under the same one with', url('https://a.example/v1'), url('https://a.example/v1/'), false],
    ['a URL prefix sharing the prefix string', url('https://a.example/v10'), url('https://a.example/v1'), false],
    ['a URL prefix on another origin', url('https://b.example/v1/x'), url('https://a.example/v1/'), false],
    ['a path under a URL', path('/v1'), url('https://a.example/'), false],
    ['a repo under a host', repo('github.com/org/repo'), host('github.com'), false],
  ])('%s', (_name, child, parent, expected) => {
    expect(isObjectWithin(object(child), object(parent))).toBe(expected);
  });
});
